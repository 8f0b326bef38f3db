-- Tokens an installation holds for senders other than its project, or scopes other than `*` (FirebaseMessaging on
-- iOS: retrieveFCMToken(forSenderID:)), one per sender and scope beside its own registration. They are nobody's
-- target here (targeting answers the installation's own registration) and leave with the installation.
CREATE TABLE sender_tokens (
    project_id    text NOT NULL,
    fid           text NOT NULL,
    sender        text NOT NULL,
    scope         text NOT NULL,
    token         text NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL,
    refreshed_at  timestamptz NOT NULL,
    PRIMARY KEY (project_id, fid, sender, scope),
    FOREIGN KEY (project_id, fid) REFERENCES installations ON DELETE CASCADE
);
