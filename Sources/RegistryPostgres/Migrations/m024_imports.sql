-- Imports from other services (token-registry import) and the project's export.

-- An installation an import made for a token without an FID: the format it came from.
ALTER TABLE installations ADD COLUMN imported_from text;

-- An import run by the source's hash: how far it got (each committed batch moves it), so a killed run resumes.
CREATE TABLE import_runs (
    project_id  text NOT NULL REFERENCES projects ON DELETE CASCADE,
    run_key     text NOT NULL,
    format      text NOT NULL,
    rows_done   bigint NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (project_id, run_key)
);
