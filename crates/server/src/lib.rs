//! Transport and lifecycle: UDP/TCP listeners, zone mux, admin HTTP, reload.
