//! Reading the file's text into the type, and writing the effective configuration back.

use std::path::Path;

use serde_saphyr::DuplicateKeyPolicy;

use super::{API_VERSION, Error, FieldError, KIND, KubeProxyConfiguration, Problem, Warning};

/// How unknown fields and repeated keys are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Decoding {
    /// kube-proxy's behaviour for v1alpha1: unknown fields are ignored with a warning that names
    /// them, and a key given twice takes its last value with a warning (kube-proxy decodes
    /// strictly, then falls back to a lenient decoder).
    #[default]
    Lenient,
    /// Unknown fields are an error that names every one of them; a repeated key is an error.
    Strict,
}

/// The YAML reader's options: `duplicates` for repeated keys, a one-line error without a
/// snippet of the file (the field's path and the line are enough).
fn options(duplicates: DuplicateKeyPolicy) -> serde_saphyr::Options {
    serde_saphyr::options! {
        duplicate_keys: duplicates,
        with_snippet: false,
    }
}

/// Decodes `text` as kube-proxy's `sigs.k8s.io/yaml` does: the YAML becomes a JSON value first
/// (YAML 1.1 scalars: `yes`/`no`/`on`/`off`/`y`/`n` unquoted are booleans, a quoted scalar
/// is a string), which is then decoded into the type as Go's JSON would: a string where a
/// number or a bool belongs is an error, and so is a number or a bool where a string belongs.
/// Returns the configuration and the paths of the unknown fields.
fn decode(
    text: &str,
    duplicates: DuplicateKeyPolicy,
) -> Result<(KubeProxyConfiguration, Vec<String>), Error> {
    // Straight into the type first, whose errors name the line; it also refuses what serde
    // would take from a JSON value but Go's JSON would not (a sequence for a struct).
    let unknown = located(text, duplicates)?;
    let value: serde_json::Value = serde_saphyr::from_str_with_options(text, options(duplicates))
        .map_err(|source| Error::Decode {
        field: String::new(),
        source: Box::new(source),
    })?;
    // An empty document is an empty object, as in Go.
    let value = if value.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        value
    };
    let config = serde_path_to_error::deserialize(&value).map_err(|e| {
        let field = e.path().to_string();
        Error::Type {
            field: if field == "." { String::new() } else { field },
            source: e.into_inner(),
        }
    })?;
    Ok((config, unknown))
}

/// Reads `text` straight into the type, for an error that names its line (a quoted number
/// or bool is taken here, and refused only by the JSON step); returns the paths of the
/// unknown fields, in the file's order.
fn located(text: &str, duplicates: DuplicateKeyPolicy) -> Result<Vec<String>, Error> {
    let mut field = String::new();
    let mut unknown = Vec::new();
    let options = serde_saphyr::options! {
        duplicate_keys: duplicates,
        with_snippet: false,
        // A bool or number where a string belongs, refused as Go's JSON refuses it.
        no_schema: true,
    };
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        let mut note =
            |path: serde_ignored::Path<'_>| unknown.push(without_options(&path.to_string()));
        let de = serde_ignored::Deserializer::new(de, &mut note);
        serde_path_to_error::deserialize::<_, KubeProxyConfiguration>(de)
            .map(|_| ())
            .map_err(|e| {
                field = without_options(&e.path().to_string());
                e.into_inner()
            })
    })
    .map_err(|source| Error::Decode {
        field: if field == "." {
            String::new()
        } else {
            field.clone()
        },
        source: Box::new(source),
    })?;
    Ok(unknown)
}

/// A field's path without the `?` segments of the `Option`s that `nullable` fields go through.
fn without_options(path: &str) -> String {
    path.replace(".?", "").replace("?.", "")
}

impl KubeProxyConfiguration {
    /// Decodes YAML or JSON. Checks `apiVersion` and `kind`; unknown fields are an error
    /// ([`Decoding::Strict`]) or returned as warnings naming them ([`Decoding::Lenient`]).
    /// Nothing is defaulted yet.
    pub fn from_text(text: &str, decoding: Decoding) -> Result<(Self, Vec<Warning>), Error> {
        let (config, unknown, duplicate) = match decode(text, DuplicateKeyPolicy::Error) {
            // kube-proxy's lenient decoder goes through YAML 1.1 maps, where a repeated key's
            // last value wins; its strict decoder refuses the file.
            Err(Error::Decode { source, .. })
                if decoding == Decoding::Lenient
                    && matches!(
                        source.without_snippet(),
                        serde_saphyr::Error::DuplicateMappingKey { .. }
                    ) =>
            {
                let (config, unknown) = decode(text, DuplicateKeyPolicy::LastWins)?;
                let (key, line) = match source.without_snippet() {
                    serde_saphyr::Error::DuplicateMappingKey { key, location } => {
                        (key.as_deref().unwrap_or("?"), location.line())
                    }
                    _ => ("?", 0),
                };
                let warning = Warning::DuplicateKey {
                    key: key.to_string(),
                    line: line as usize,
                };
                (config, unknown, Some(warning))
            }
            result => {
                let (config, unknown) = result?;
                (config, unknown, None)
            }
        };
        let mut errors = Vec::new();
        if config.api_version != API_VERSION {
            errors.push(FieldError::new(
                "apiVersion",
                Problem::Unsupported {
                    value: config.api_version.clone(),
                    expected: API_VERSION,
                },
            ));
        }
        if config.kind != KIND {
            errors.push(FieldError::new(
                "kind",
                Problem::Unsupported {
                    value: config.kind.clone(),
                    expected: KIND,
                },
            ));
        }
        if !errors.is_empty() {
            return Err(Error::invalid(errors));
        }
        match decoding {
            Decoding::Strict if !unknown.is_empty() => Err(Error::UnknownFields(unknown)),
            _ => Ok((
                config,
                duplicate
                    .into_iter()
                    .chain(
                        unknown
                            .into_iter()
                            .map(|field| Warning::UnknownField { field }),
                    )
                    .collect(),
            )),
        }
    }

    /// The YAML kube-proxy's `--write-config-to` writes: every field, sorted, durations in
    /// Go's form.
    pub fn to_yaml(&self) -> Result<String, Error> {
        serde_saphyr::to_string(self).map_err(Error::Encode)
    }

    /// Writes [`Self::to_yaml`] to `path`.
    pub fn write_to(&self, path: &Path) -> Result<(), Error> {
        let text = self.to_yaml()?;
        std::fs::write(path, text).map_err(|source| Error::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}
