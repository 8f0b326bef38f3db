import Postgres

/// The registry's schema: numbered SQL files under `Migrations/`, compiled into the binary.
public enum Schema {
    public static let migrations: [Migration] = [
        Migration(version: 1, name: "initial", sql: String(decoding: PackageResources.m001_initial_sql, as: UTF8.self)),
        Migration(
            version: 2, name: "registrations",
            sql: String(decoding: PackageResources.m002_registrations_sql, as: UTF8.self)),
        Migration(
            version: 3, name: "deletions", sql: String(decoding: PackageResources.m003_deletions_sql, as: UTF8.self)),
        Migration(
            version: 4, name: "registration_expiry",
            sql: String(decoding: PackageResources.m004_registration_expiry_sql, as: UTF8.self)),
        Migration(
            version: 5, name: "fid_retirement",
            sql: String(decoding: PackageResources.m005_fid_retirement_sql, as: UTF8.self)),
        Migration(
            version: 6, name: "app_identities",
            sql: String(decoding: PackageResources.m006_app_identities_sql, as: UTF8.self)),
        Migration(
            version: 7, name: "service_accounts",
            sql: String(decoding: PackageResources.m007_service_accounts_sql, as: UTF8.self)),
        Migration(
            version: 8, name: "checkins", sql: String(decoding: PackageResources.m008_checkins_sql, as: UTF8.self)),
        Migration(
            version: 9, name: "linked_service_security",
            sql: String(decoding: PackageResources.m009_linked_service_security_sql, as: UTF8.self)),
        Migration(
            version: 10, name: "keys_that_end",
            sql: String(decoding: PackageResources.m010_keys_that_end_sql, as: UTF8.self)),
    ]

    public static var migrator: Migrator { Migrator(migrations: migrations) }
}
