-- One installation's topic subscription in one statement, so it is one round trip and can be committed with others
-- (group commit): the steps PostgresTopicStore.add takes for a batch, for one FID. The installation's row lock comes
-- first, as in the batch; each later statement of this VOLATILE function takes a new snapshot in READ COMMITTED, so
-- the subscription, consent and the topic count are read after the lock (a consent withdrawal, which takes the same
-- lock, is either seen here or waits for this transaction).
--
-- outcome: 'already_exists' (since: when it was made), 'not_found', 'no_consent', 'too_many_topics', or 'added'
-- (since: p_at). The rule is SubscribeResult.decide's, in the same order.
CREATE FUNCTION registry_subscribe(
    p_project text, p_fid text, p_topic text, p_at timestamptz, p_messaging text, p_max_topics integer)
RETURNS TABLE (outcome text, since timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_exists boolean;
    v_granted boolean;
    v_count bigint;
BEGIN
    PERFORM 1 FROM installations WHERE project_id = p_project AND fid = p_fid FOR UPDATE;
    v_exists := FOUND;
    SELECT ts.created_at INTO since FROM topic_subscriptions ts
        WHERE ts.project_id = p_project AND ts.fid = p_fid AND ts.topic = p_topic;
    IF FOUND THEN
        outcome := 'already_exists';
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT v_exists THEN
        outcome := 'not_found';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.granted INTO v_granted FROM consents c
        WHERE c.project_id = p_project AND c.fid = p_fid AND c.purpose = p_messaging;
    IF NOT coalesce(v_granted, false) THEN
        outcome := 'no_consent';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT count(*) INTO v_count FROM topic_subscriptions ts WHERE ts.project_id = p_project AND ts.fid = p_fid;
    IF v_count >= p_max_topics THEN
        outcome := 'too_many_topics';
        RETURN NEXT;
        RETURN;
    END IF;
    INSERT INTO topic_subscriptions (project_id, fid, topic, created_at) VALUES (p_project, p_fid, p_topic, p_at);
    outcome := 'added';
    since := p_at;
    RETURN NEXT;
END
$$;
