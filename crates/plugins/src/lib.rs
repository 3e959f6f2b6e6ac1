//! The plugins, one module each; each module's doc is its README.
