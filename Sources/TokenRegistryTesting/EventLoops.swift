import HTTP
import Postgres

/// As in the service's composition root: test services put their database connections on their HTTP event loops.
extension EventLoop: PostgresEventLoop {}
