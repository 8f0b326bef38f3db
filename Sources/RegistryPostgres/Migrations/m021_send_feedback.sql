-- Send feedback (docs/feedback.md): registrations a sender reported dead are retired (no longer targeted) or
-- quarantined (still targeted, marked); each channel of a project counts its results a minute at a time, and its
-- breaker turns retirements into quarantine when the window looks like a sender misconfiguration.
ALTER TABLE registrations DROP CONSTRAINT registrations_state_check;
-- NOT VALID, then VALIDATE: the check of existing rows takes no lock that stops writes.
ALTER TABLE registrations ADD CONSTRAINT registrations_state_check
    CHECK (state IN ('active', 'disabled', 'retired')) NOT VALID;
ALTER TABLE registrations VALIDATE CONSTRAINT registrations_state_check;
ALTER TABLE registrations
    ADD COLUMN retired_at             timestamptz,
    ADD COLUMN retired_reason         text,
    ADD COLUMN retired_channel        text,
    ADD COLUMN invalid_since          timestamptz,
    ADD COLUMN quarantined_at         timestamptz,
    ADD COLUMN quarantine_reason      text,
    ADD COLUMN quarantine_channel     text,
    ADD COLUMN quarantined_by_breaker boolean NOT NULL DEFAULT false;
-- The purge finds retired rows oldest first; the breaker's clearance finds what it held.
CREATE INDEX registrations_retired ON registrations (retired_at) WHERE state = 'retired';
CREATE INDEX registrations_breaker_held ON registrations (project_id, quarantine_channel) WHERE quarantined_by_breaker;

CREATE TABLE feedback_stats (
    project_id  text NOT NULL,
    channel     text NOT NULL,
    class       text NOT NULL,
    minute      timestamptz NOT NULL,
    n           integer NOT NULL,
    PRIMARY KEY (project_id, channel, minute, class)
);
CREATE INDEX feedback_stats_minute ON feedback_stats (minute);

CREATE TABLE feedback_breakers (
    project_id  text NOT NULL,
    channel     text NOT NULL,
    tripped     boolean NOT NULL DEFAULT false,
    tripped_at  timestamptz,
    cleared_at  timestamptz,
    failing     integer NOT NULL DEFAULT 0,
    results     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, channel)
);

-- Every write that registers or refreshes a registration (it sets the state back to active, moves refreshed_at, or
-- changes the token) revives it if it was retired, with one exception (Retirement.survives in Swift): the same token
-- reported with a client time not after the time the sender said it became invalid; and clears its quarantine. A trigger, so every path that writes a
-- registration (register, refresh, import) follows the rule.
CREATE FUNCTION registry_feedback_revive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'retired' AND NEW.state <> 'retired' THEN
        IF NEW.token = OLD.token AND NEW.apns_token IS NOT DISTINCT FROM OLD.apns_token
            AND OLD.invalid_since IS NOT NULL AND NEW.client_time IS NOT NULL AND NEW.client_time <= OLD.invalid_since
        THEN
            NEW.state := 'retired';
            RETURN NEW;
        END IF;
        NEW.retired_at := NULL;
        NEW.retired_reason := NULL;
        NEW.retired_channel := NULL;
        NEW.invalid_since := NULL;
        INSERT INTO event_outbox (project_id, type, fid, data)
        VALUES (NEW.project_id, 'registration.revived', NEW.fid, NULL);
    ELSIF NEW.refreshed_at IS NOT DISTINCT FROM OLD.refreshed_at AND NEW.token = OLD.token THEN
        -- Not a write of the registration (send feedback's own marks, a consent withdrawal): nothing to clear.
        RETURN NEW;
    END IF;
    NEW.quarantined_at := NULL;
    NEW.quarantine_reason := NULL;
    NEW.quarantine_channel := NULL;
    NEW.quarantined_by_breaker := false;
    RETURN NEW;
END
$$;
CREATE TRIGGER registrations_feedback_revive BEFORE UPDATE ON registrations
    FOR EACH ROW EXECUTE FUNCTION registry_feedback_revive();

-- A batch of classified send results in one statement (one round trip for up to 1000).
--  1. The batch's channels' breaker rows are locked first, in channel order (the clearance takes the same lock
--     before it touches the window, so the two never deadlock), and each channel's window counts the batch: its
--     distinct tokens that name a live registration (a token sent twice, or one the registry does not hold, counts
--     once or not at all), before any of its retirements apply; a breaker that trips holds them back.
--  2. The registrations the batch names are locked, in FID order (COLLATE "C", Swift's byte order).
--  3. Each result in order: its registration is read under that lock (the active holder refreshed last wins when an
--     APNs token is held twice), and each change matches the token in its own WHERE and answers what it did, so a
--     refresh that replaced the token meanwhile is never retired. A "may be dead" result only quarantines.
CREATE FUNCTION registry_apply_feedback(
    p_project text, p_tokens text[], p_channels text[], p_classes text[], p_codes text[], p_since text[],
    p_at timestamptz, p_share float8, p_minimum integer, p_window_seconds float8)
RETURNS TABLE (ord integer, action text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_channel text;
    v_failing integer;
    v_results integer;
    v_tripped text[] := '{}';
    v_reg registrations;
    v_i integer;
    v_class text;
    v_data text;
    v_since timestamptz;
    v_lower text[] := ARRAY(SELECT lower(t) FROM unnest(p_tokens) AS t);
BEGIN
    FOR v_channel IN SELECT DISTINCT c FROM unnest(p_channels) AS c ORDER BY 1 LOOP
        INSERT INTO feedback_breakers (project_id, channel) VALUES (p_project, v_channel) ON CONFLICT DO NOTHING;
        PERFORM 1 FROM feedback_breakers b WHERE b.project_id = p_project AND b.channel = v_channel FOR UPDATE;
    END LOOP;

    INSERT INTO feedback_stats AS s (project_id, channel, class, minute, n)
    SELECT p_project, u.c, u.k, date_trunc('minute', p_at), count(*)
    FROM (
        SELECT DISTINCT ON (u.t, u.c) u.t, u.c, u.k
        FROM unnest(p_tokens, p_channels, p_classes) WITH ORDINALITY AS u(t, c, k, o)
        WHERE EXISTS (
            SELECT 1 FROM registrations r
            WHERE r.project_id = p_project AND r.state = 'active'
              AND (r.token = u.t OR (u.c = 'apns' AND r.apns_token = lower(u.t))))
        ORDER BY u.t, u.c, u.o
    ) u
    GROUP BY u.c, u.k ORDER BY u.c, u.k
    ON CONFLICT (project_id, channel, minute, class) DO UPDATE SET n = s.n + excluded.n;

    FOR v_channel IN SELECT DISTINCT c FROM unnest(p_channels) AS c ORDER BY 1 LOOP
        SELECT coalesce(sum(n) FILTER (WHERE class IN ('dead', 'suspect')), 0), coalesce(sum(n), 0)
            INTO v_failing, v_results
            FROM feedback_stats
            WHERE project_id = p_project AND channel = v_channel
              AND minute > p_at - make_interval(secs => p_window_seconds);
        IF EXISTS (SELECT 1 FROM feedback_breakers b WHERE b.project_id = p_project AND b.channel = v_channel
                   AND b.tripped) THEN
            v_tripped := v_tripped || v_channel;
        ELSIF v_failing >= p_minimum AND v_failing >= p_share * greatest(v_results, 1) THEN
            UPDATE feedback_breakers b SET tripped = true, tripped_at = p_at, failing = v_failing, results = v_results
                WHERE b.project_id = p_project AND b.channel = v_channel;
            INSERT INTO event_outbox (project_id, type, fid, data)
            VALUES (p_project, 'feedback.breaker_tripped', '',
                json_build_object('channel', v_channel, 'failing', v_failing, 'results', v_results)::text);
            v_tripped := v_tripped || v_channel;
        END IF;
    END LOOP;

    PERFORM 1 FROM registrations r
        WHERE r.project_id = p_project AND (r.token = ANY (p_tokens) OR r.apns_token = ANY (v_lower))
        ORDER BY r.fid COLLATE "C" FOR UPDATE;

    FOR v_i IN 1 .. coalesce(array_length(p_tokens, 1), 0) LOOP
        ord := v_i;
        v_class := p_classes[v_i];
        -- Never after the batch's own time: a sender's clock (or a made-up timestamp) far ahead would keep the
        -- registration retired through every later refresh.
        v_since := CASE WHEN p_since[v_i] = '' THEN NULL ELSE least(p_since[v_i]::timestamptz, p_at) END;
        IF v_class NOT IN ('dead', 'suspect') THEN
            action := 'ignored';
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT r.* INTO v_reg FROM registrations r
            WHERE r.project_id = p_project
              AND (r.token = p_tokens[v_i] OR (p_channels[v_i] = 'apns' AND r.apns_token = v_lower[v_i]))
            ORDER BY (r.token = p_tokens[v_i]) DESC, (r.state = 'active') DESC, r.refreshed_at DESC,
                r.fid COLLATE "C"
            LIMIT 1 FOR UPDATE;
        IF NOT FOUND OR v_reg.state = 'disabled' THEN
            -- Unknown, or consent was withdrawn: nobody targets it, feedback has nothing to do with it.
            action := 'not_current';
        ELSIF v_reg.state = 'retired' THEN
            action := 'already_retired';
        ELSIF v_since IS NOT NULL AND v_reg.refreshed_at >= v_since THEN
            action := 'refreshed_since';
        ELSE
            v_data := json_build_object('reason', p_codes[v_i], 'class', v_class, 'channel', p_channels[v_i])::text;
            IF p_channels[v_i] = ANY (v_tripped) OR v_class = 'suspect' THEN
                UPDATE registrations r SET quarantined_at = coalesce(r.quarantined_at, p_at),
                    quarantine_reason = p_codes[v_i], quarantine_channel = p_channels[v_i],
                    quarantined_by_breaker = r.quarantined_by_breaker OR p_channels[v_i] = ANY (v_tripped)
                    WHERE r.project_id = p_project AND r.fid = v_reg.fid AND r.token = v_reg.token;
                IF NOT FOUND THEN
                    action := 'not_current';
                ELSE
                    IF v_reg.quarantined_at IS NULL THEN
                        INSERT INTO event_outbox (project_id, type, fid, data)
                        VALUES (p_project, 'registration.quarantined', v_reg.fid, v_data);
                    END IF;
                    action := 'quarantined';
                END IF;
            ELSE
                -- The retirement's moment: the sender's, or now (a replayed report from before it revives nothing).
                UPDATE registrations r SET state = 'retired', retired_at = p_at, retired_reason = p_codes[v_i],
                    retired_channel = p_channels[v_i], invalid_since = coalesce(v_since, p_at), quarantined_at = NULL,
                    quarantine_reason = NULL, quarantine_channel = NULL, quarantined_by_breaker = false
                    WHERE r.project_id = p_project AND r.fid = v_reg.fid AND r.token = v_reg.token;
                IF NOT FOUND THEN
                    action := 'not_current';
                ELSE
                    INSERT INTO event_outbox (project_id, type, fid, data)
                    VALUES (p_project, 'registration.invalidated', v_reg.fid, v_data);
                    action := 'retired';
                END IF;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
