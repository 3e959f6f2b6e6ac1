//! DNS wire format: zero-copy query views, response builder into reused buffers, records.
