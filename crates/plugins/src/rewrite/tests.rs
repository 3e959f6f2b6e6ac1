//! Unit tests of *rewrite*.
