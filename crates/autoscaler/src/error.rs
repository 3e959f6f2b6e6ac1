//! The autoscaler's errors: bad parameters (never fatal: the poll fails, nothing is scaled)
//! and API failures (the poll fails; `--max-sync-failures` decides when to give up).

/// A ConfigMap's parameters that cannot be used. The texts are upstream's, with the JSON
/// key named where upstream names its Go field.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    /// The data does not hold exactly one key.
    #[error("invalid configMap format, expected only one entry, got: {0}")]
    Entries(String),
    /// The one key is not a mode.
    #[error("not a supported control mode: {0}")]
    Mode(String),
    /// Not JSON.
    #[error("could not parse parameters ({0})")]
    Json(String),
    /// A value of the wrong JSON type for its key (Go's `UnmarshalTypeError`).
    #[error("could not parse parameters (json: cannot unmarshal {found} into Go {} of type {want})", go_place(.field))]
    Type {
        /// What the JSON held: `string`, `number 1.5`, …
        found: String,
        /// `linearParams.min`, or the struct's name for the whole value.
        field: String,
        /// Go's type: `int`, `float64`, `bool`, …
        want: String,
    },
    /// Decoded, but upstream's validation rejects it.
    #[error("{0}")]
    Invalid(String),
    /// One of the above, in the parameters of `mode`.
    #[error("Error syncing configMap with controller: error parsing {mode} params: {source}")]
    InMode {
        /// `linear` or `ladder`.
        mode: &'static str,
        /// What is wrong.
        source: Box<ParamsError>,
    },
}

fn go_place(field: &str) -> String {
    if field.contains('.') {
        format!("struct field {field}")
    } else {
        "value".to_owned()
    }
}

/// A failed poll.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The ConfigMap's parameters.
    #[error("{0}")]
    Params(#[from] ParamsError),
    /// A request to the API server.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// kube-rs's error.
        source: kube::Error,
    },
    /// The scale subresource answered without `spec.replicas`' owner.
    #[error("{0}")]
    Other(String),
}
