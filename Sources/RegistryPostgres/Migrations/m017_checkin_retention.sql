-- Check-ins that never registered anything are purged a week after they were last seen (CheckinService.
-- unusedRetention): the jobs find them by this index, oldest first, a bounded batch a run.
CREATE INDEX checkins_unused ON checkins (last_checkin_at) WHERE fid IS NULL;
