-- Services that hold installation data and must hear of every deletion.
CREATE TABLE linked_services (
    project_id text NOT NULL REFERENCES projects ON DELETE CASCADE,
    name       text NOT NULL,
    endpoint   text NOT NULL,
    -- The HMAC key of the Registry-Signature header; shown to the caller once, kept here to sign.
    secret     text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (project_id, name)
);

-- One record per deleted installation until it is purged (after the audit period, never after the deadline).
CREATE TABLE deletions (
    id           bigserial PRIMARY KEY,
    project_id   text NOT NULL,
    fid          text NOT NULL,
    fid_hmac     bytea NOT NULL,
    reason       text NOT NULL CHECK (reason IN ('client', 'server', 'inactivity')),
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    completed_at timestamptz,
    UNIQUE (project_id, fid)
);
CREATE INDEX deletions_deadline ON deletions (deadline);
CREATE INDEX deletions_completed ON deletions (completed_at);

-- The outbox: one delivery per linked service; delivery_id is stable across retries.
CREATE TABLE deletion_deliveries (
    deletion_id     bigint NOT NULL REFERENCES deletions ON DELETE CASCADE,
    service         text NOT NULL,
    delivery_id     text NOT NULL UNIQUE,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'accepted', 'acknowledged')),
    attempts        integer NOT NULL DEFAULT 0,
    -- Due time; a worker that claims a delivery pushes it forward by a lease, so a worker that dies mid-way
    -- only delays the delivery (at-least-once).
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    acknowledged_at timestamptz,
    PRIMARY KEY (deletion_id, service)
);
CREATE INDEX deletion_deliveries_due ON deletion_deliveries (next_attempt_at) WHERE state = 'pending';

-- Deletions that reached their deadline with services still unacknowledged: kept by id and keyed FID hash only.
CREATE TABLE overdue_deletions (
    deletion_id  bigint PRIMARY KEY,
    project_id   text NOT NULL,
    fid_hmac     bytea NOT NULL,
    reason       text NOT NULL,
    requested_at timestamptz NOT NULL,
    deadline     timestamptz NOT NULL,
    services     text[] NOT NULL,
    purged_at    timestamptz NOT NULL
);

-- Delivery attempts and failures per service, for metrics that every replica reads alike.
CREATE TABLE delivery_counters (
    project_id text NOT NULL,
    service    text NOT NULL,
    attempts   bigint NOT NULL DEFAULT 0,
    failures   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, service)
);

-- Change feed. Writers append to event_outbox inside their own transactions; one relay at a time (advisory lock)
-- moves rows of finished transactions into events in one go, so sequence numbers never skip a late commit.
CREATE TABLE event_outbox (
    id         bigserial PRIMARY KEY,
    project_id text NOT NULL,
    type       text NOT NULL,
    fid        text NOT NULL,
    data       text,
    tx         xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE events (
    seq        bigserial PRIMARY KEY,
    project_id text NOT NULL,
    type       text NOT NULL,
    fid        text NOT NULL,
    data       text,
    created_at timestamptz NOT NULL
);
CREATE INDEX events_project ON events (project_id, seq);
CREATE INDEX events_fid ON events (project_id, fid);

CREATE TABLE job_runs (
    job         text PRIMARY KEY,
    last_run_at timestamptz NOT NULL,
    duration_ms double precision NOT NULL,
    processed   integer NOT NULL
);
