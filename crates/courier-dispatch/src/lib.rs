//! courier-dispatch: The courier runtime: claimer, sender, heartbeat, reconciler, webhook and enqueue HTTP API.
