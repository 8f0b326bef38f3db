import Postgres

/// The registry's schema: numbered SQL files under `Migrations/`, compiled into the binary.
public enum Schema {
    public static let migrations: [Migration] = [
        migration(1, "initial", PackageResources.m001_initial_sql),
        migration(2, "registrations", PackageResources.m002_registrations_sql),
        migration(3, "deletions", PackageResources.m003_deletions_sql),
        migration(4, "registration_expiry", PackageResources.m004_registration_expiry_sql),
        migration(5, "fid_retirement", PackageResources.m005_fid_retirement_sql),
        migration(6, "app_identities", PackageResources.m006_app_identities_sql),
        migration(7, "service_accounts", PackageResources.m007_service_accounts_sql),
        migration(8, "checkins", PackageResources.m008_checkins_sql),
        migration(9, "linked_service_security", PackageResources.m009_linked_service_security_sql),
        migration(10, "keys_that_end", PackageResources.m010_keys_that_end_sql),
        migration(11, "refresh_function", PackageResources.m011_refresh_function_sql),
        migration(12, "consent_function", PackageResources.m012_consent_function_sql),
        migration(13, "register_function", PackageResources.m013_register_function_sql),
        migration(14, "subscribe_function", PackageResources.m014_subscribe_function_sql),
        migration(15, "deletion_counts", PackageResources.m015_deletion_counts_sql),
        migration(16, "receipts_and_fair_deliveries", PackageResources.m016_receipts_and_fair_deliveries_sql),
        migration(17, "checkin_retention", PackageResources.m017_checkin_retention_sql),
        migration(18, "service_account_revocation", PackageResources.m018_service_account_revocation_sql),
        migration(19, "refresh_moves_tokens", PackageResources.m019_refresh_moves_tokens_sql),
        migration(20, "sender_tokens", PackageResources.m020_sender_tokens_sql),
        migration(21, "send_feedback", PackageResources.m021_send_feedback_sql),
        migration(22, "operations", PackageResources.m022_operations_sql),
        migration(23, "people_and_audit", PackageResources.m023_people_and_audit_sql),
        migration(24, "imports", PackageResources.m024_imports_sql),
        migration(25, "write_and_stream_costs", PackageResources.m025_write_and_stream_costs_sql),
        migration(26, "refresh_with_its_audit_entry", PackageResources.m026_refresh_with_its_audit_entry_sql),
        migration(27, "refresh_in_one_function", PackageResources.m027_refresh_in_one_function_sql),
        migration(28, "targets_from_the_primary_key", PackageResources.m028_targets_from_the_primary_key_sql),
        migration(29, "consent_purposes_bounded", PackageResources.m029_consent_purposes_bounded_sql),
        migration(30, "events_by_installation_in_order", PackageResources.m030_events_by_installation_in_order_sql),
        migration(31, "deletion_receipts_by_project", PackageResources.m031_deletion_receipts_by_project_sql),
        migration(32, "shared_api_keys", PackageResources.m032_shared_api_keys_sql),
        migration(
            33, "delivery_counters_of_live_services", PackageResources.m033_delivery_counters_of_live_services_sql),
        migration(
            34, "deletions_completed_by_every_outcome",
            PackageResources.m034_deletions_completed_by_every_outcome_sql),
        migration(35, "audit_scrubs_in_bounded_steps", PackageResources.m035_audit_scrubs_in_bounded_steps_sql),
    ]

    private static func migration(_ version: Int, _ name: String, _ sql: [UInt8]) -> Migration {
        Migration(version: version, name: name, sql: String(decoding: sql, as: UTF8.self))
    }

    public static var migrator: Migrator { Migrator(migrations: migrations) }
}
