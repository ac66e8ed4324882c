//! How configured tools are listed to agents: their MCP definitions and the annotations their
//! action class implies.

use postern_core::ActionClass;
use rmcp::model::{Tool, ToolAnnotations};
use serde_json::Value;

/// A tool as listed: its schema and description (an upstream's when the config gives none),
/// an upstream tool's title and output schema as the upstream lists them,
/// the annotations of its declared class; an upstream's own annotations are shown in `_meta`
/// only (untrusted hints), and an unavailable tool says why in its description.
pub(super) fn listed_tool(t: postern_pipeline::ListedTool) -> Tool {
    let schema = t.input_schema.as_object().cloned().unwrap_or_default();
    let description = match &t.unavailable {
        Some(why) => format!(
            "[unavailable: {why}; calls fail without sending anything] {}",
            t.description
        ),
        None => t.description.clone(),
    };
    let mut tool = Tool::new(t.contract.name.clone(), description, schema)
        .with_annotations(annotations(t.contract.class));
    tool.title = t.title.clone();
    tool.output_schema = t
        .output_schema
        .as_ref()
        .and_then(Value::as_object)
        .map(|o| std::sync::Arc::new(o.clone()));
    let mut meta = serde_json::Map::new();
    if let Some(a) = t.upstream_annotations {
        meta.insert("io.postern/upstream-annotations".into(), a);
    }
    if let Some(why) = t.unavailable {
        meta.insert("io.postern/unavailable".into(), Value::String(why));
    }
    if !meta.is_empty() {
        tool.meta = Some(rmcp::model::MetaObject(meta));
    }
    tool
}

pub(super) fn annotations(class: ActionClass) -> ToolAnnotations {
    let a = ToolAnnotations::new().open_world(true);
    match class {
        ActionClass::ReadOnly => a.read_only(true).destructive(false).idempotent(true),
        ActionClass::IdempotentWrite => a.read_only(false).destructive(false).idempotent(true),
        ActionClass::ConditionalWrite => a.read_only(false).destructive(false).idempotent(false),
        ActionClass::Irreversible | ActionClass::RemoteCommand => {
            a.read_only(false).destructive(true).idempotent(false)
        }
    }
}
