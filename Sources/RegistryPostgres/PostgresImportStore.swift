import Crypto
import Foundation
import Postgres
import Registry

/// ``ImportStore`` on PostgreSQL. A batch is staged in one statement (each column an array, `unnest`ed into a
/// temporary table), then merged set by set in the same transaction: installations, consent and its ledger,
/// registrations, topics, users, sender tokens, the run's progress. No statement runs per row.
struct PostgresImportStore: ImportStore {
    let db: Database

    /// `text[]` of a batch's column.
    static func column(_ batch: [PlannedImport], _ value: (PlannedImport) -> String?) -> String? {
        NullableTextArray(batch.map(value)).postgresText
    }

    static func time(_ date: Date?) -> String? { date?.postgresText }
    static func flag(_ value: Bool?) -> String? { value.map { $0 ? "t" : "f" } }

    func merge(
        _ batch: [PlannedImport], projectID: String, format: ImportFormat, run key: String?, rowsThrough: Int,
        dryRun: Bool
    ) async throws -> ImportCounts {
        guard !batch.isEmpty else { return ImportCounts() }
        let columns: [String?] = [
            Self.column(batch) { $0.installation.fid }, Self.column(batch) { Hex.encode($0.fidHash) },
            Self.column(batch) { $0.installation.appID }, Self.column(batch) { $0.installation.sdkVersion },
            Self.column(batch) { Self.time($0.installation.createdAt) },
            Self.column(batch) { Self.time($0.installation.lastSeenAt) }, Self.column(batch) { $0.importedFrom },
            Self.column(batch) { $0.registration?.token }, Self.column(batch) { $0.registration?.platform.rawValue },
            Self.column(batch) { $0.registration?.apnsToken }, Self.column(batch) { $0.registration?.apnsEnvironment?.rawValue },
            Self.column(batch) { $0.registration?.bundleID }, Self.column(batch) { $0.registration?.appVersion },
            Self.column(batch) { $0.registration?.sdkVersion }, Self.column(batch) { $0.registration?.web?.endpoint },
            Self.column(batch) { $0.registration?.web?.auth }, Self.column(batch) { $0.registration?.web?.p256dh },
            Self.column(batch) { $0.registration?.web?.applicationPubKey },
            Self.column(batch) { $0.registration?.web?.origin }, Self.column(batch) { $0.registration?.state.rawValue },
            Self.column(batch) { Self.time($0.registration?.clientTime) },
            Self.column(batch) { Self.time($0.registration?.createdAt) },
            Self.column(batch) { Self.time($0.registration?.refreshedAt) },
            Self.column(batch) { Self.time($0.registration?.retirement?.at) },
            Self.column(batch) { $0.registration?.retirement?.reason },
            Self.column(batch) { $0.registration?.retirement?.channel.rawValue },
            Self.column(batch) { Self.time($0.registration?.retirement?.invalidSince) },
            Self.column(batch) { Self.time($0.registration?.quarantine?.at) },
            Self.column(batch) { $0.registration?.quarantine?.reason },
            Self.column(batch) { $0.registration?.quarantine?.channel.rawValue },
            Self.column(batch) { Self.flag($0.registration?.quarantine?.byBreaker) },
            Self.column(batch) { Self.flag($0.messagingConsent) }, Self.column(batch) { Self.time($0.consentTime) },
            Self.column(batch) { $0.userID }, Self.column(batch) { $0.userHash.map(Hex.encode) },
            Self.column(batch) { Self.time($0.boundAt) }, Self.column(batch) { Self.flag(!$0.consents.isEmpty) },
        ]
        // Child rows, each keyed by its installation's FID.
        var consents: [[String?]] = Array(repeating: [], count: 7)
        var ledger: [[String?]] = Array(repeating: [], count: 8)
        var topics: [[String?]] = Array(repeating: [], count: 3)
        var senders: [[String?]] = Array(repeating: [], count: 6)
        for item in batch {
            let fid = item.installation.fid
            for c in item.consents {
                for (i, v) in [fid, c.purpose, c.granted ? "t" : "f", c.policyVersion, c.source, c.actor.rawValue,
                    Self.time(c.updatedAt)].enumerated() { consents[i].append(v) }
            }
            for e in item.ledger {
                for (i, v) in [fid, e.purpose, e.granted ? "t" : "f", Self.flag(e.previous), e.actor.rawValue, e.source,
                    e.policyVersion, Self.time(e.recordedAt)].enumerated() { ledger[i].append(v) }
            }
            for t in item.topics {
                for (i, v) in [fid, t.topic, Self.time(t.createdAt)].enumerated() { topics[i].append(v) }
            }
            for t in item.senderTokens {
                for (i, v) in [fid, t.sender, t.scope, t.token, Self.time(t.createdAt), Self.time(t.refreshedAt)]
                    .enumerated() { senders[i].append(v) }
            }
        }
        let source = format.consentSource
        let work: (PostgresConnection) async throws -> ImportCounts = { c in
            var counts = ImportCounts()
            try await c.execute(Self.create)
            try await c.query(PostgresQuery(unsafeSQL: Self.stage, binds: columns))
            try await c.query(PostgresQuery(unsafeSQL: Self.stageConsents, binds: consents.map { NullableTextArray($0).postgresText }))
            try await c.query(PostgresQuery(unsafeSQL: Self.stageLedger, binds: ledger.map { NullableTextArray($0).postgresText }))
            try await c.query(PostgresQuery(unsafeSQL: Self.stageTopics, binds: topics.map { NullableTextArray($0).postgresText }))
            try await c.query(PostgresQuery(unsafeSQL: Self.stageSenders, binds: senders.map { NullableTextArray($0).postgresText }))
            // Fresh temporary tables have no statistics: without them the planner joins 5000 rows to 5000 by nested
            // loops (a batch took 2.5 s instead of a tenth of that).
            try await c.execute("ANALYZE import_stage, import_topics")
            // A deleted FID never comes back.
            counts.deletedSkipped = try await c.query(
                "DELETE FROM import_stage s USING retired_fids r WHERE r.project_id = \(projectID) AND r.fid_hmac = s.fid_hmac"
            ).affectedRows
            // Installations: made, or seen later than stored.
            let installed = try await c.query(
                """
                WITH written AS (
                    INSERT INTO installations (project_id, fid, app_id, refresh_token_hash, sdk_version, created_at,
                        last_seen_at, imported_from)
                    SELECT \(projectID), s.fid, s.app_id, '\\x00'::bytea, s.sdk_version,
                        s.created_at, s.last_seen_at, s.imported_from
                    FROM import_stage s ORDER BY s.fid COLLATE "C"
                    ON CONFLICT (project_id, fid) DO UPDATE SET last_seen_at = excluded.last_seen_at
                        WHERE installations.last_seen_at < excluded.last_seen_at
                    RETURNING fid, xmax = 0 AS made
                ), marked AS (
                    UPDATE import_stage s SET made = w.made FROM written w WHERE s.fid = w.fid RETURNING w.made
                )
                SELECT count(*) FILTER (WHERE made)::int AS made, count(*) FILTER (WHERE NOT made)::int AS seen FROM marked
                """
            ).first
            counts.installationsCreated = try installed?.require("made") ?? 0
            counts.installationsUpdated = try installed?.require("seen") ?? 0
            // Retired while this batch waited: a deletion of one of its FIDs that was under way when the check above
            // ran (its snapshot could not see the retirement) had the insert wait for it, and then find no row in
            // the way. This statement's snapshot sees it: what was made of such an FID goes before anything is
            // attached to it (as a create re-checks after its insert, `registry_assert_fid_live`).
            let late = try await c.query(
                """
                WITH late AS (
                    DELETE FROM import_stage s USING retired_fids r
                    WHERE r.project_id = \(projectID) AND r.fid_hmac = s.fid_hmac RETURNING s.fid, s.made
                ), gone AS (
                    DELETE FROM installations i USING late
                    WHERE i.project_id = \(projectID) AND i.fid = late.fid AND late.made
                )
                SELECT count(*) FILTER (WHERE made)::int AS made, count(*) FILTER (WHERE NOT made)::int AS seen FROM late
                """
            ).first
            let lateMade: Int = try late?.require("made") ?? 0
            let lateSeen: Int = try late?.require("seen") ?? 0
            counts.deletedSkipped += lateMade + lateSeen
            counts.installationsCreated -= lateMade
            counts.installationsUpdated -= lateSeen
            // Consent of what was made: the export's states and ledger as they were, or the source's state (the app's
            // default when it had none) with one ledger entry of source import:<format> at the source's time.
            try await c.query(
                """
                INSERT INTO consents (project_id, fid, purpose, granted, policy_version, source, actor, updated_at)
                SELECT \(projectID), c.fid, c.purpose, c.granted, c.policy_version, c.source, c.actor, c.updated_at
                FROM import_consents c JOIN import_stage s ON s.fid = c.fid AND s.made
                ON CONFLICT DO NOTHING
                """)
            try await c.query(
                """
                INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, policy_version,
                    recorded_at)
                SELECT \(projectID), l.fid, l.purpose, l.granted, l.previous, l.actor, l.source, l.policy_version,
                    l.recorded_at
                FROM import_ledger l JOIN import_stage s ON s.fid = l.fid AND s.made ORDER BY l.n
                """)
            let initial = try await c.query(
                """
                WITH made AS (
                    INSERT INTO consents (project_id, fid, purpose, granted, source, actor, updated_at)
                    SELECT \(projectID), s.fid, \(ConsentService.messaging), coalesce(s.consent, a.auto_init_default),
                        \(source), 'server', s.consent_at
                    FROM import_stage s JOIN apps a ON a.app_id = s.app_id
                    WHERE s.made AND NOT s.registry
                    ON CONFLICT DO NOTHING
                    RETURNING fid, granted, updated_at
                )
                INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, recorded_at)
                SELECT \(projectID), fid, \(ConsentService.messaging), granted, NULL, 'server', \(source), updated_at
                FROM made
                """)
            counts.consentChanges += initial.affectedRows
            // Consent of what existed: the source's state when it differs and is newer than the stored one.
            let changed = try await c.query(
                """
                WITH due AS (
                    SELECT c.fid, c.granted AS before, s.consent, s.consent_at FROM consents c
                    JOIN import_stage s ON c.project_id = \(projectID) AND c.fid = s.fid
                        AND c.purpose = \(ConsentService.messaging)
                    WHERE NOT s.made AND s.consent IS NOT NULL AND c.granted <> s.consent AND c.updated_at < s.consent_at
                    FOR UPDATE OF c
                ), written AS (
                    UPDATE consents c SET granted = due.consent, source = \(source), actor = 'server',
                        updated_at = due.consent_at
                    FROM due WHERE c.project_id = \(projectID) AND c.fid = due.fid
                        AND c.purpose = \(ConsentService.messaging)
                    RETURNING c.fid, c.granted, due.before, c.updated_at
                )
                INSERT INTO consent_events (project_id, fid, purpose, granted, previous, actor, source, recorded_at)
                SELECT \(projectID), fid, \(ConsentService.messaging), granted, before, 'server', \(source), updated_at
                FROM written
                """)
            counts.consentChanges += changed.affectedRows
            // The consent gate: no registration is active without messaging consent.
            try await c.query(
                """
                UPDATE import_stage s SET state = 'disabled' FROM consents c
                WHERE c.project_id = \(projectID) AND c.fid = s.fid AND c.purpose = \(ConsentService.messaging)
                  AND NOT c.granted AND s.state = 'active'
                """)
            try await c.query(
                """
                UPDATE registrations r SET state = 'disabled' FROM consents c, import_stage s
                WHERE c.project_id = \(projectID) AND c.fid = s.fid AND c.purpose = \(ConsentService.messaging)
                  AND NOT c.granted AND r.project_id = \(projectID) AND r.fid = s.fid AND r.state = 'active'
                """)
            // Registrations: a token another installation holds moves when the import's is newer, and stays when it
            // is not (the row is counted, not written); the installation's own is replaced when the import's is newer.
            try await c.query(
                """
                DELETE FROM registrations r USING import_stage s
                WHERE r.project_id = \(projectID) AND r.token = s.token AND r.fid <> s.fid AND r.refreshed_at < s.refreshed_at
                """)
            counts.olderThanStored = try await c.query(
                """
                DELETE FROM import_stage s USING registrations r
                WHERE r.project_id = \(projectID) AND r.token = s.token AND r.fid <> s.fid
                """
            ).affectedRows
            counts.registrationsWritten = try await c.query(
                """
                INSERT INTO registrations (project_id, fid, token, platform, apns_token, apns_environment, bundle_id,
                    app_version, sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state,
                    client_time, created_at, refreshed_at, retired_at, retired_reason, retired_channel, invalid_since,
                    quarantined_at, quarantine_reason, quarantine_channel, quarantined_by_breaker)
                SELECT \(projectID), s.fid, s.token, s.platform, s.apns_token, s.apns_environment, s.bundle_id,
                    s.app_version, s.reg_sdk_version, s.web_endpoint, s.web_auth, s.web_p256dh, s.web_app_key,
                    s.web_origin, s.state, s.client_time, s.reg_created_at, s.refreshed_at, s.retired_at,
                    s.retired_reason, s.retired_channel, s.invalid_since, s.quarantined_at, s.quarantine_reason,
                    s.quarantine_channel, coalesce(s.quarantined_by_breaker, false)
                FROM import_stage s WHERE s.token IS NOT NULL
                ON CONFLICT (project_id, fid) DO UPDATE SET token = excluded.token, platform = excluded.platform,
                    apns_token = excluded.apns_token, apns_environment = excluded.apns_environment,
                    bundle_id = excluded.bundle_id, app_version = excluded.app_version,
                    sdk_version = excluded.sdk_version, web_endpoint = excluded.web_endpoint,
                    web_auth = excluded.web_auth, web_p256dh = excluded.web_p256dh, web_app_key = excluded.web_app_key,
                    web_origin = excluded.web_origin, state = excluded.state, client_time = excluded.client_time,
                    refreshed_at = excluded.refreshed_at, expired_reported = false
                WHERE registrations.refreshed_at < excluded.refreshed_at
                """
            ).affectedRows
            // Topics, for consented installations (as every subscribe): what they hold stays.
            counts.topicsAdded = try await c.query(
                """
                INSERT INTO topic_subscriptions (project_id, fid, topic, created_at)
                SELECT \(projectID), t.fid, t.topic, t.created_at FROM import_topics t
                JOIN import_stage s ON s.fid = t.fid
                JOIN consents c ON c.project_id = \(projectID) AND c.fid = t.fid AND c.purpose = \(ConsentService.messaging)
                    AND c.granted
                ON CONFLICT DO NOTHING
                """
            ).affectedRows
            // Users: a binding made, or moved when the import's is newer; each in the history.
            counts.usersBound = try await c.query(
                """
                WITH before AS (
                    SELECT b.fid, b.user_id, b.user_hmac FROM user_bindings b JOIN import_stage s
                        ON b.project_id = \(projectID) AND b.fid = s.fid
                ), written AS (
                    INSERT INTO user_bindings (project_id, fid, user_id, user_hmac, bound_at)
                    SELECT \(projectID), s.fid, s.user_id, decode(s.user_hmac, 'hex'), s.bound_at FROM import_stage s
                    WHERE s.user_id IS NOT NULL
                    ON CONFLICT (project_id, fid) DO UPDATE SET user_id = excluded.user_id,
                        user_hmac = excluded.user_hmac, bound_at = excluded.bound_at
                    WHERE user_bindings.user_id <> excluded.user_id AND user_bindings.bound_at < excluded.bound_at
                    RETURNING fid, user_id, user_hmac, bound_at
                )
                INSERT INTO user_binding_history (project_id, fid, action, user_id, user_hmac, previous_user_id,
                    previous_user_hmac, at)
                SELECT \(projectID), w.fid, CASE WHEN b.fid IS NULL THEN 'bound' ELSE 'moved' END, w.user_id, w.user_hmac,
                    b.user_id, b.user_hmac, w.bound_at
                FROM written w LEFT JOIN before b ON b.fid = w.fid
                """
            ).affectedRows
            try await c.query(
                """
                INSERT INTO sender_tokens (project_id, fid, sender, scope, token, created_at, refreshed_at)
                SELECT \(projectID), t.fid, t.sender, t.scope, t.token, t.created_at, t.refreshed_at
                FROM import_senders t JOIN import_stage s ON s.fid = t.fid AND s.made
                ON CONFLICT DO NOTHING
                """)
            if let key {
                try await c.query(
                    """
                    INSERT INTO import_runs (project_id, run_key, format, rows_done) VALUES (\(projectID), \(key),
                        \(format.rawValue), \(rowsThrough))
                    ON CONFLICT (project_id, run_key) DO UPDATE SET rows_done = excluded.rows_done, finished_at = NULL
                    """)
            }
            return counts
        }
        if dryRun {
            // The same statements, rolled back: what the batch would do, and nothing done.
            do {
                return try await db.transaction { c -> ImportCounts in
                    let counts = try await work(c)
                    throw DryRun(counts: counts)
                }
            } catch let dry as DryRun {
                return dry.counts
            }
        }
        return try await db.transaction(work)
    }

    struct DryRun: Error { let counts: ImportCounts }

    /// The staging tables of a batch, dropped at its commit.
    static let create = """
        CREATE TEMP TABLE import_stage (fid text, fid_hmac bytea, app_id text, sdk_version text, created_at timestamptz,
            last_seen_at timestamptz, imported_from text, token text, platform text, apns_token text,
            apns_environment text, bundle_id text, app_version text, reg_sdk_version text, web_endpoint text,
            web_auth text, web_p256dh text, web_app_key text, web_origin text, state text, client_time timestamptz,
            reg_created_at timestamptz, refreshed_at timestamptz, retired_at timestamptz, retired_reason text,
            retired_channel text, invalid_since timestamptz, quarantined_at timestamptz, quarantine_reason text,
            quarantine_channel text, quarantined_by_breaker boolean, consent boolean, consent_at timestamptz,
            user_id text, user_hmac text, bound_at timestamptz, registry boolean, made boolean NOT NULL DEFAULT false)
            ON COMMIT DROP;
        CREATE TEMP TABLE import_consents (fid text, purpose text, granted boolean, policy_version text, source text,
            actor text, updated_at timestamptz) ON COMMIT DROP;
        CREATE TEMP TABLE import_ledger (n bigint, fid text, purpose text, granted boolean, previous boolean, actor text,
            source text, policy_version text, recorded_at timestamptz) ON COMMIT DROP;
        CREATE TEMP TABLE import_topics (fid text, topic text, created_at timestamptz) ON COMMIT DROP;
        CREATE TEMP TABLE import_senders (fid text, sender text, scope text, token text, created_at timestamptz,
            refreshed_at timestamptz) ON COMMIT DROP
        """

    static let stage = """
        INSERT INTO import_stage
        SELECT fid, decode(fid_hmac, 'hex'), app_id, sdk_version, created_at::timestamptz, last_seen_at::timestamptz,
            imported_from, token, platform, apns_token, apns_environment, bundle_id, app_version, reg_sdk_version,
            web_endpoint, web_auth, web_p256dh, web_app_key, web_origin, state, client_time::timestamptz,
            reg_created_at::timestamptz, refreshed_at::timestamptz, retired_at::timestamptz, retired_reason,
            retired_channel, invalid_since::timestamptz, quarantined_at::timestamptz, quarantine_reason,
            quarantine_channel, quarantined_by_breaker::boolean, consent::boolean, consent_at::timestamptz, user_id,
            user_hmac, bound_at::timestamptz, registry::boolean, false
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
            $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[],
            $17::text[], $18::text[], $19::text[], $20::text[], $21::text[], $22::text[], $23::text[], $24::text[],
            $25::text[], $26::text[], $27::text[], $28::text[], $29::text[], $30::text[], $31::text[], $32::text[],
            $33::text[], $34::text[], $35::text[], $36::text[], $37::text[])
        AS s(fid, fid_hmac, app_id, sdk_version, created_at, last_seen_at, imported_from, token, platform, apns_token,
            apns_environment, bundle_id, app_version, reg_sdk_version, web_endpoint, web_auth, web_p256dh, web_app_key,
            web_origin, state, client_time, reg_created_at, refreshed_at, retired_at, retired_reason, retired_channel,
            invalid_since, quarantined_at, quarantine_reason, quarantine_channel, quarantined_by_breaker, consent,
            consent_at, user_id, user_hmac, bound_at, registry)
        """

    static let stageConsents = """
        INSERT INTO import_consents SELECT fid, purpose, granted::boolean, policy_version, source, actor,
            updated_at::timestamptz
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
        AS c(fid, purpose, granted, policy_version, source, actor, updated_at)
        """

    static let stageLedger = """
        INSERT INTO import_ledger SELECT n, fid, purpose, granted::boolean, previous::boolean, actor, source,
            policy_version, recorded_at::timestamptz
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
            WITH ORDINALITY AS l(fid, purpose, granted, previous, actor, source, policy_version, recorded_at, n)
        """

    static let stageTopics = """
        INSERT INTO import_topics SELECT fid, topic, created_at::timestamptz FROM unnest($1::text[], $2::text[], $3::text[])
        AS t(fid, topic, created_at)
        """

    static let stageSenders = """
        INSERT INTO import_senders SELECT fid, sender, scope, token, created_at::timestamptz, refreshed_at::timestamptz
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
        AS t(fid, sender, scope, token, created_at, refreshed_at)
        """

    func run(projectID: String, key: String) async throws -> ImportRunState? {
        try await db.query(
            "SELECT rows_done, finished_at IS NOT NULL AS finished FROM import_runs WHERE project_id = \(projectID) AND run_key = \(key)"
        ).first.map { ImportRunState(rowsDone: Int(try $0.require("rows_done", as: Int64.self)), finished: try $0.require("finished")) }
    }

    func finish(projectID: String, key: String, rows: Int) async throws {
        try await db.query(
            """
            INSERT INTO import_runs (project_id, run_key, format, rows_done, finished_at)
            VALUES (\(projectID), \(key), '', \(rows), now())
            ON CONFLICT (project_id, run_key) DO UPDATE SET rows_done = excluded.rows_done, finished_at = now()
            """)
    }

    /// What the unbounded-in-number children of a page (topics, sender tokens) may weigh together: the page ends
    /// before the installation that would take them past it (never before its first). A page of 1,000 installations
    /// that each hold 2,000 topics of 900 bytes was 1.8 GB read into memory at once; now such a page is two
    /// installations, and the export goes on from there.
    static let exportPageChildBytes = 4 << 20

    /// A page in FID order: the installations, then each kind of row of all of them at once (eight statements a page,
    /// whatever its size). It may hold fewer than `limit` installations (``exportPageChildBytes``) with more to come.
    func exportPage(projectID: String, after: String, limit: Int, ledgerLimit: Int) async throws
        -> [ExportedInstallation]
    {
        var rows = Array(
            try await db.query(
                """
                SELECT *, imported_from FROM installations WHERE project_id = \(projectID) AND fid > \(after)
                ORDER BY fid LIMIT \(limit)
                """))
        guard !rows.isEmpty else { return [] }
        // Each installation's children's weight (index ranges summed, nothing of theirs read out), in page order.
        let weights = try await db.query(
            """
            SELECT f.n, coalesce((SELECT sum(octet_length(t.topic) + 16) FROM topic_subscriptions t
                    WHERE t.project_id = \(projectID) AND t.fid = f.fid), 0)
                + coalesce((SELECT sum(octet_length(s.token) + octet_length(s.sender) + octet_length(s.scope) + 32)
                    FROM sender_tokens s WHERE s.project_id = \(projectID) AND s.fid = f.fid), 0) AS bytes
            FROM unnest(\(TextArray(try rows.map { try $0.require("fid", as: String.self) }))::text[])
                WITH ORDINALITY AS f(fid, n)
            ORDER BY f.n
            """
        ).map { try $0.require("bytes", as: Int64.self) }
        var total: Int64 = 0
        for (n, weight) in weights.enumerated() {
            total += weight
            if total > Int64(Self.exportPageChildBytes) && n > 0 {
                rows = Array(rows.prefix(n))
                break
            }
        }
        var items: [String: ExportedInstallation] = [:]
        var order: [String] = []
        for row in rows {
            let installation = try PostgresInstallationStore.decode(row)
            order.append(installation.fid)
            items[installation.fid] = ExportedInstallation(
                installation: installation, importedFrom: try row.decode("imported_from"), registration: nil,
                senderTokens: [], consents: [], ledger: [], topics: [], binding: nil)
        }
        let fids = TextArray(order)
        for row in try await db.query(
            "SELECT * FROM registrations WHERE project_id = \(projectID) AND fid = ANY(\(fids)::text[])")
        {
            let r = try PostgresRegistrationStore.decode(row)
            items[r.fid]?.registration = r
        }
        for row in try await db.query(
            "SELECT * FROM consents WHERE project_id = \(projectID) AND fid = ANY(\(fids)::text[]) ORDER BY fid, purpose")
        {
            items[try row.require("fid")]?.consents.append(
                ConsentState(
                    purpose: try row.require("purpose"), granted: try row.require("granted"),
                    policyVersion: try row.decode("policy_version"), source: try row.decode("source"),
                    actor: try row.require("actor", as: ConsentActor.self), updatedAt: try row.require("updated_at")))
        }
        // The ledger has no bound: at most `ledgerLimit` entries of each installation, each read from the start of its
        // range of `consent_events_subject`.
        for row in try await db.query(
            """
            SELECT e.* FROM unnest(\(fids)::text[]) AS f(fid)
            CROSS JOIN LATERAL (
                SELECT * FROM consent_events WHERE project_id = \(projectID) AND fid = f.fid ORDER BY seq
                LIMIT \(ledgerLimit)) e
            ORDER BY e.fid, e.seq
            """)
        {
            items[try row.require("fid")]?.ledger.append(try Self.ledgerEntry(row))
        }
        for row in try await db.query(
            """
            SELECT fid, topic, created_at FROM topic_subscriptions WHERE project_id = \(projectID)
              AND fid = ANY(\(fids)::text[]) ORDER BY fid, topic
            """)
        {
            items[try row.require("fid")]?.topics.append(
                TopicSubscription(topic: try row.require("topic"), createdAt: try row.require("created_at")))
        }
        for row in try await db.query(
            "SELECT fid, user_id, bound_at FROM user_bindings WHERE project_id = \(projectID) AND fid = ANY(\(fids)::text[])")
        {
            items[try row.require("fid")]?.binding = try PostgresUserStore.binding(row)
        }
        for row in try await db.query(
            """
            SELECT * FROM sender_tokens WHERE project_id = \(projectID) AND fid = ANY(\(fids)::text[])
            ORDER BY fid, sender, scope
            """)
        {
            items[try row.require("fid")]?.senderTokens.append(
                SenderTokenRecord(
                    sender: try row.require("sender"), scope: try row.require("scope"), token: try row.require("token"),
                    createdAt: try row.require("created_at"), refreshedAt: try row.require("refreshed_at")))
        }
        return order.compactMap { items[$0] }
    }

    func exportLedger(projectID: String, fid: String, after sequence: Int64, limit: Int) async throws -> [ConsentEvent] {
        try await db.query(
            """
            SELECT * FROM consent_events WHERE project_id = \(projectID) AND fid = \(fid) AND seq > \(sequence)
            ORDER BY seq LIMIT \(limit)
            """
        ).map(Self.ledgerEntry)
    }

    static func ledgerEntry(_ row: PostgresRow) throws -> ConsentEvent {
        ConsentEvent(
            sequence: try row.require("seq"), purpose: try row.require("purpose"), granted: try row.require("granted"),
            previous: try row.decode("previous"), actor: try row.require("actor", as: ConsentActor.self),
            source: try row.decode("source"), policyVersion: try row.decode("policy_version"),
            recordedAt: try row.require("recorded_at"))
    }
}
