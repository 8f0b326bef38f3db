-- A topic page's live registrations within one window of the topic's subscribers (FIDs in (p_after, p_upper]), by
-- the join method the caller chose from the window's density (PostgresTargetingStore.members). The planner picks
-- neither well here: with the window's bounds it estimates the row counts right, yet it prefers 10,000 index probes
-- (29–44 ms) to a merge join of three index ranges (11–21 ms) when the topic covers the range densely, and a hash join
-- (137–214 ms) to the probes when it covers it sparsely (docs/benchmarks.md). A function's SET clause holds only
-- while it runs, and a SQL function with one is planned at each call, under it.
--
-- The filter is TargetFilter's: active, refreshed after p_expired_before, messaging consent granted.

-- Dense: the topic holds most FIDs of the range, so reading the three ranges side by side in FID order is cheapest.
CREATE FUNCTION registry_topic_window_merged(
    p_project text, p_topic text, p_after text, p_upper text, p_messaging text, p_active text,
    p_expired_before timestamptz, p_limit integer)
RETURNS TABLE (fid text, token text, platform text, refreshed_at timestamptz)
LANGUAGE sql STABLE SET enable_nestloop = off SET enable_hashjoin = off AS $$
    SELECT r.fid, r.token, r.platform, r.refreshed_at FROM topic_subscriptions ts
    JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
    JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = p_messaging AND c.granted
    WHERE ts.project_id = p_project AND ts.topic = p_topic
      AND ts.fid > p_after AND r.fid > p_after AND c.fid > p_after
      AND ts.fid <= p_upper AND r.fid <= p_upper AND c.fid <= p_upper
      AND r.state = p_active AND r.refreshed_at > p_expired_before
    ORDER BY ts.fid LIMIT p_limit
$$;

-- Sparse: most FIDs of the range are not in the topic, so each subscriber's registration and consent are looked up.
CREATE FUNCTION registry_topic_window_probed(
    p_project text, p_topic text, p_after text, p_upper text, p_messaging text, p_active text,
    p_expired_before timestamptz, p_limit integer)
RETURNS TABLE (fid text, token text, platform text, refreshed_at timestamptz)
LANGUAGE sql STABLE SET enable_hashjoin = off SET enable_mergejoin = off AS $$
    SELECT r.fid, r.token, r.platform, r.refreshed_at FROM topic_subscriptions ts
    JOIN registrations r ON r.project_id = ts.project_id AND r.fid = ts.fid
    JOIN consents c ON c.project_id = r.project_id AND c.fid = r.fid AND c.purpose = p_messaging AND c.granted
    WHERE ts.project_id = p_project AND ts.topic = p_topic AND ts.fid > p_after AND ts.fid <= p_upper
      AND r.state = p_active AND r.refreshed_at > p_expired_before
    ORDER BY ts.fid LIMIT p_limit
$$;
