//! Test helpers: the test rig, the differential harness, DNS query helpers.
