import HTTP
import Postgres

/// The composition root puts the database connections on the HTTP event loops: a handler's query then runs on the
/// loop that serves its request, with no thread hop. `EventLoop` has the members `PostgresEventLoop` asks for.
extension EventLoop: PostgresEventLoop {}
