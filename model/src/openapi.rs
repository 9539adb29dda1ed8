//! OpenAPI schemas of the model's own-format types (feature `openapi`): what the router's
//! `/openapi.json` says about them where a derive cannot see their custom `Deserialize`.

use serde_json::json;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::attributes::Attributes;
use crate::time::TimeInput;

fn from_json(v: serde_json::Value) -> RefOr<Schema> {
    RefOr::T(serde_json::from_value(v).expect("a valid schema literal"))
}

/// A [`crate::batch::Capped`] list: an array of at most `MAX` items.
pub fn capped<T: PartialSchema, const MAX: usize>() -> RefOr<Schema> {
    let mut schema = json!({"type": "array", "maxItems": MAX});
    schema["items"] = serde_json::to_value(T::schema()).expect("schemas serialize");
    from_json(schema)
}

impl PartialSchema for TimeInput {
    fn schema() -> RefOr<Schema> {
        from_json(json!({
            "description": "An RFC 3339 time, or Unix epoch milliseconds.",
            "oneOf": [
                {"type": "string", "format": "date-time"},
                {"type": "number"}
            ],
            "examples": ["2026-11-22T10:15:30.123Z", 1795342530123u64]
        }))
    }
}
impl ToSchema for TimeInput {}

impl PartialSchema for Attributes {
    fn schema() -> RefOr<Schema> {
        let scalar = json!({"type": ["string", "number", "boolean"]});
        from_json(json!({
            "description": "Attributes: values are strings, numbers, booleans or arrays of these.",
            "type": ["object", "null"],
            "additionalProperties": {"anyOf": [scalar, {"type": "array", "items": scalar}]}
        }))
    }
}
impl ToSchema for Attributes {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_written_schemas_serialize_as_written() {
        let time = serde_json::to_value(TimeInput::schema()).unwrap();
        assert_eq!(time["oneOf"][1], json!({"type": "number"}), "{time}");
        let attrs = serde_json::to_value(Attributes::schema()).unwrap();
        assert_eq!(attrs["type"], json!(["object", "null"]), "{attrs}");
        assert_eq!(attrs["additionalProperties"]["anyOf"][1]["type"], "array", "{attrs}");
        let list = serde_json::to_value(capped::<TimeInput, 7>()).unwrap();
        assert_eq!((list["maxItems"].as_u64(), &list["items"]["oneOf"]), (Some(7), &time["oneOf"]), "{list}");
    }
}
