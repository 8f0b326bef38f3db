/// The closed vocabularies of the domain. Each is stored and sent by its raw value; nothing compares the strings.

/// The kinds of change-feed events (`GET /v1/projects/{project}/events`).
public enum EventType: String, Sendable, CaseIterable {
    case installationCreated = "installation.created"
    case installationDeleted = "installation.deleted"
    case registrationCreated = "registration.created"
    case registrationRefreshed = "registration.refreshed"
    case registrationMoved = "registration.moved"
    case registrationDisabled = "registration.disabled"
    case registrationExpired = "registration.expired"
    case consentChanged = "consent.changed"
    /// An installation was bound to a user, moved to another, or unbound (logout, or displaced under the user's cap).
    case userBound = "user.bound"
    case userMoved = "user.moved"
    case userUnbound = "user.unbound"
    /// Send feedback retired the registration's token (data: `reason`, `class`, `channel`).
    case registrationInvalidated = "registration.invalidated"
    /// Send feedback marked the token as maybe dead, or the breaker held its retirement back (data as above).
    case registrationQuarantined = "registration.quarantined"
    /// A retired registration was registered or refreshed again.
    case registrationRevived = "registration.revived"
    /// A channel's breaker tripped: the project's feedback looks like a sender misconfiguration (no FID; data:
    /// `channel`, `failing`, `results`).
    case feedbackBreakerTripped = "feedback.breaker_tripped"
}

/// The stored state of a registration. Staleness and expiry are not states: they are computed from the last
/// refresh when read (``Freshness``), so they are never out of date.
public enum RegistrationState: String, Sendable {
    case active
    /// Messaging consent was withdrawn; only a new registration revives it.
    case disabled
    /// A sender reported the token dead (send feedback); a later registration or refresh revives it.
    case retired
}

/// Where one linked service stands with one deletion.
public enum DeliveryState: String, Sendable {
    /// Not yet accepted: attempts continue with back-off.
    case pending
    /// The service answered 202 and will acknowledge later.
    case accepted
    /// The service confirmed the deletion (2xx, or an acknowledgement after 202).
    case acknowledged
    /// Past the deadline and purged without the service's confirmation (overdue receipts).
    case unacknowledged
    /// The service was removed before it confirmed: nobody will (never shown as confirmed).
    case abandoned

    /// Whether nothing more will happen to the delivery.
    public var isFinal: Bool { self == .acknowledged || self == .abandoned }
}

/// Where a deletion stands, as its receipt says.
public enum ReceiptState: String, Sendable, CaseIterable {
    /// Some linked service has not confirmed yet, and the deadline is ahead.
    case pending
    /// The deadline passed before every linked service confirmed.
    case overdue
    /// Every linked service that existed at the time confirmed (or there was none).
    case done
}
