-- The W3C traceparent of the request that deleted an installation, passed on in its deletion notices.
ALTER TABLE deletions ADD COLUMN traceparent text;
