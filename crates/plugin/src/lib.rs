//! The plugin contract: request, response writer, chain flow, setup context, registry order.
