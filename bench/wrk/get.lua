-- A plain keep-alive GET of the URL wrk was given (what `wrk URL` does without a script).
wrk.method = "GET"
