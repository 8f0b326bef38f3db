-- One transaction that does nothing: the floor of any transaction (protocol, snapshot, commit).
SELECT 1;
