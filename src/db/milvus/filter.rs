//! Metadata filters as Milvus boolean expressions.

use super::*;

/// `filter` as a Milvus boolean expression over the JSON field `field` (None: admits all).
/// Equality also matches a metadata array holding the value, as the embedded index does.
pub(crate) fn expression(filter: &Filter, field: &str) -> Option<String> {
    let clauses = filter.clauses_json();
    if clauses.is_empty() {
        return None;
    }
    let parts: Vec<String> = clauses
        .iter()
        .map(|(key, cond)| {
            let at = format!("{field}[{}]", json!(key));
            match cond {
                crate::index::ClauseJson::AnyOf(values) => {
                    // `==` per value rather than `in [..]`: milvus-lite takes `in` only on a
                    // field, not on a JSON path; Milvus takes both.
                    let list = serde_json::Value::Array(values.clone()).to_string();
                    let equal: Vec<String> =
                        values.iter().map(|v| format!("{at} == {v}")).collect();
                    format!(
                        "({} or json_contains_any({at}, {list}))",
                        equal.join(" or ")
                    )
                }
                crate::index::ClauseJson::Range { low, high } => {
                    let mut c = Vec::new();
                    if let Some((b, inc)) = low {
                        c.push(format!(
                            "{at} {} {}",
                            if *inc { ">=" } else { ">" },
                            num(*b)
                        ));
                    }
                    if let Some((b, inc)) = high {
                        c.push(format!(
                            "{at} {} {}",
                            if *inc { "<=" } else { "<" },
                            num(*b)
                        ));
                    }
                    format!("({})", c.join(" and "))
                }
            }
        })
        .collect();
    Some(parts.join(" and "))
}

pub(super) fn num(x: f64) -> String {
    // Always with a decimal point, so Milvus compares as a float.
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

pub(super) fn ids_expr(ids: &[u64]) -> String {
    let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    format!("id in [{}]", list.join(","))
}

/// `expr` (a translated filter, if any) restricted to the documents `ids`.
pub(super) fn and_ids(expr: Option<&str>, ids: &[u64]) -> String {
    match expr {
        Some(x) => format!("({x}) and {}", ids_expr(ids)),
        None => ids_expr(ids),
    }
}

/// The expression admitting what `filter` admits among `among` (None: everything).
pub(super) fn restrict(filter: Option<&Filter>, among: Option<&[u64]>) -> Option<String> {
    let expr = filter.and_then(|f| expression(f, "meta"));
    match among {
        Some(ids) => Some(and_ids(expr.as_deref(), ids)),
        None => expr,
    }
}
