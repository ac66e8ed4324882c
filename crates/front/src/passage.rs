//! Everything that is not a side effect, passed through to the upstreams an actor sees (those
//! with at least one tool it may call): resources (list, templates, read, subscribe),
//! prompts (list, get), completions and the log level. Nothing here is an execution; resource
//! and prompt reads are recorded in the calls log (who read what, when).
//!
//! Naming. Prompts are served as `<prefix><name>`, the prefix of the upstream's tools under
//! `expose = "all"` (else `<upstream>_`), so two upstreams' prompts never share a name.
//! Resource URIs stay as the upstream wrote them: tool results link to them, and a client reads
//! what it was given. A URI is routed to the upstream that listed it (the first in name order,
//! when two list one URI), else to one whose template matches it, else to each upstream that
//! serves resources in turn until one has it.
//!
//! Lists of several upstreams are paged as one: the cursor names the upstream and carries its
//! own cursor (`<upstream>:<its cursor>`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, CompleteResult, ErrorCode,
    GetPromptRequest, GetPromptRequestParams, GetPromptResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResult, Reference, ServerCapabilities, ServerResult,
};
use rmcp::ErrorData;
use tokio_util::sync::CancellationToken;

use postern_channels::mcp::PassError;

use postern_pipeline::VisibleUpstream;

/// How many resource URIs the routing index keeps before it starts again (a URI it forgot is
/// found by template or by asking each upstream).
const REMEMBERED_URIS: usize = 100_000;

/// Where resource URIs go, learned from what upstreams list.
#[derive(Default)]
pub(crate) struct ResourceRoutes {
    uris: Mutex<HashMap<String, String>>,
    templates: Mutex<HashMap<String, Vec<String>>>,
}

impl ResourceRoutes {
    fn learn_uris<'a>(&self, upstream: &str, uris: impl Iterator<Item = &'a str>) {
        let mut known = self.uris.lock().unwrap_or_else(|e| e.into_inner());
        for uri in uris {
            if known.len() >= REMEMBERED_URIS {
                known.clear();
            }
            // The first upstream (in name order) to list a URI keeps it.
            match known.get(uri) {
                Some(owner) if owner.as_str() < upstream => {}
                _ => {
                    known.insert(uri.to_string(), upstream.to_string());
                }
            }
        }
    }

    fn learn_templates<'a>(&self, upstream: &str, templates: impl Iterator<Item = &'a str>) {
        let mut known = self.templates.lock().unwrap_or_else(|e| e.into_inner());
        let list = known.entry(upstream.to_string()).or_default();
        for t in templates {
            if !list.iter().any(|k| k == t) {
                list.push(t.to_string());
            }
        }
    }

    /// The upstreams (of `visible`) to ask for `uri`, best first.
    fn candidates<'a>(
        &self,
        uri: &str,
        visible: &'a [VisibleUpstream],
    ) -> Vec<&'a VisibleUpstream> {
        let owner = self.uris.lock().ok().and_then(|k| k.get(uri).cloned());
        if let Some(v) = owner.and_then(|o| visible.iter().find(|v| v.upstream.name() == o)) {
            return vec![v];
        }
        let templates = self.templates.lock().map(|t| t.clone()).unwrap_or_default();
        let matched: Vec<&VisibleUpstream> = visible
            .iter()
            .filter(|v| {
                templates
                    .get(v.upstream.name())
                    .is_some_and(|ts| ts.iter().any(|t| template_matches(t, uri)))
            })
            .collect();
        if !matched.is_empty() {
            return matched;
        }
        visible
            .iter()
            .filter(|v| serves(v, |c| c.resources.is_some()))
            .collect()
    }
}

/// Whether `uri` fits the RFC 6570 template `template`: literal text must match, a `{var}`
/// takes any text without `/`, a `{+var}` (and the other operators) any text at all.
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        parts.push((
            rest[..open].to_string(),
            rest[open + 1..open + close].to_string(),
        ));
        rest = &rest[open + close + 1..];
    }
    fn go(parts: &[(String, String)], tail: &str, uri: &str) -> bool {
        let Some(((literal, var), more)) = parts.split_first() else {
            return uri == tail;
        };
        let Some(after) = uri.strip_prefix(literal.as_str()) else {
            return false;
        };
        let any = var.starts_with(['+', '#', '/', '.', ';', '?', '&']);
        (0..=after.len())
            .filter(|&i| after.is_char_boundary(i))
            .take_while(|&i| any || !after[..i].contains('/'))
            .any(|i| go(more, tail, &after[i..]))
    }
    go(&parts, rest, uri)
}

fn serves(v: &VisibleUpstream, has: impl Fn(&ServerCapabilities) -> bool) -> bool {
    v.upstream.capabilities().is_some_and(|c| has(&c))
}

/// The MCP error for a request passed through that got no answer.
pub(crate) fn pass_error(e: PassError) -> ErrorData {
    match e {
        PassError::Refused(e) => e,
        PassError::Down(why) => ErrorData::new(ErrorCode::INTERNAL_ERROR, why, None),
        PassError::Lost(why) => ErrorData::new(ErrorCode::INTERNAL_ERROR, why, None),
    }
}

fn unexpected(upstream: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("upstream {upstream} answered with a result of another kind"),
        None,
    )
}

/// A page of a list gathered over several upstreams: where to start, and the cursor to give.
struct Paging<'a> {
    visible: Vec<&'a VisibleUpstream>,
    start: usize,
    cursor: Option<String>,
}

impl<'a> Paging<'a> {
    fn new(
        visible: &'a [VisibleUpstream],
        has: impl Fn(&ServerCapabilities) -> bool,
        request: Option<PaginatedRequestParams>,
    ) -> Result<Paging<'a>, ErrorData> {
        let visible: Vec<&VisibleUpstream> = visible.iter().filter(|v| serves(v, &has)).collect();
        let Some(cursor) = request.and_then(|r| r.cursor) else {
            return Ok(Paging {
                visible,
                start: 0,
                cursor: None,
            });
        };
        let bad = || {
            ErrorData::invalid_params(
                format!("cursor {cursor:?} is not one this gateway gave"),
                None,
            )
        };
        let (name, theirs) = cursor.split_once(':').ok_or_else(bad)?;
        let start = visible
            .iter()
            .position(|v| v.upstream.name() == name)
            .ok_or_else(bad)?;
        Ok(Paging {
            visible,
            start,
            cursor: (!theirs.is_empty()).then(|| theirs.to_string()),
        })
    }

    /// Walks the upstreams from the cursor, asking each for a page, until one has more.
    async fn walk<T>(
        self,
        mut ask: impl FnMut(&'a VisibleUpstream, Option<String>) -> futures_page::Page<'a, T>,
    ) -> Result<(Vec<T>, Option<String>), ErrorData> {
        let mut items = Vec::new();
        let mut cursor = self.cursor;
        for v in self.visible.into_iter().skip(self.start) {
            match ask(v, cursor.take()).await {
                Ok((page, Some(next))) => {
                    items.extend(page);
                    return Ok((items, Some(format!("{}:{next}", v.upstream.name()))));
                }
                Ok((page, None)) => items.extend(page),
                // One upstream down does not hide the others' lists.
                Err(e) => {
                    tracing::info!(upstream = %v.upstream.name(), error = %e.message, "an upstream's list was left out")
                }
            }
        }
        Ok((items, None))
    }
}

mod futures_page {
    /// One upstream's page of a list: its items and its next cursor.
    pub(super) type Page<'a, T> = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<(Vec<T>, Option<String>), rmcp::ErrorData>>
                + Send
                + 'a,
        >,
    >;
}

/// A list request (resources, templates, prompts) for the page at `cursor`.
fn page_request<M: Default>(
    cursor: Option<String>,
) -> rmcp::model::RequestOptionalParam<M, PaginatedRequestParams> {
    rmcp::model::RequestOptionalParam {
        method: M::default(),
        params: cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c))),
        extensions: Default::default(),
    }
}

/// Passes requests through for one actor's view.
pub(crate) struct Passage<'a> {
    pub routes: &'a Arc<ResourceRoutes>,
    pub visible: Vec<VisibleUpstream>,
    pub cancel: CancellationToken,
}

impl Passage<'_> {
    async fn ask(
        &self,
        v: &VisibleUpstream,
        request: ClientRequest,
    ) -> Result<ServerResult, ErrorData> {
        v.upstream
            .pass(request, &self.cancel)
            .await
            .map_err(pass_error)
    }

    pub(crate) async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let paging = Paging::new(&self.visible, |c| c.resources.is_some(), request)?;
        let (items, next) = paging
            .walk(|v, cursor| {
                Box::pin(async move {
                    let request = ClientRequest::ListResourcesRequest(page_request(cursor));
                    match self.ask(v, request).await? {
                        ServerResult::ListResourcesResult(r) => {
                            self.routes.learn_uris(
                                v.upstream.name(),
                                r.resources.iter().map(|x| x.uri.as_str()),
                            );
                            Ok((r.resources, r.next_cursor))
                        }
                        _ => Err(unexpected(v.upstream.name())),
                    }
                })
            })
            .await?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    pub(crate) async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let paging = Paging::new(&self.visible, |c| c.resources.is_some(), request)?;
        let (items, next) = paging
            .walk(|v, cursor| {
                Box::pin(async move {
                    let request = ClientRequest::ListResourceTemplatesRequest(page_request(cursor));
                    match self.ask(v, request).await? {
                        ServerResult::ListResourceTemplatesResult(r) => {
                            self.routes.learn_templates(
                                v.upstream.name(),
                                r.resource_templates.iter().map(|t| t.uri_template.as_str()),
                            );
                            Ok((r.resource_templates, r.next_cursor))
                        }
                        _ => Err(unexpected(v.upstream.name())),
                    }
                })
            })
            .await?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// Reads `uri` from the upstream that has it; which one answered.
    pub(crate) async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
    ) -> Result<(ReadResourceResult, String), ErrorData> {
        let candidates = self.routes.candidates(&params.uri, &self.visible);
        let mut first_error = None;
        for v in candidates {
            let request =
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params.clone()));
            match self.ask(v, request).await {
                Ok(ServerResult::ReadResourceResult(r)) => {
                    self.routes
                        .learn_uris(v.upstream.name(), std::iter::once(params.uri.as_str()));
                    return Ok((r, v.upstream.name().to_string()));
                }
                Ok(_) => return Err(unexpected(v.upstream.name())),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| {
            ErrorData::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!(
                    "no upstream this actor sees serves the resource {:?}",
                    params.uri
                ),
                None,
            )
        }))
    }

    /// The upstream that serves `uri`, for a subscription.
    pub(crate) fn resource_owner(&self, uri: &str) -> Result<VisibleUpstream, ErrorData> {
        self.routes
            .candidates(uri, &self.visible)
            .into_iter()
            .find(|v| {
                serves(v, |c| {
                    c.resources
                        .as_ref()
                        .is_some_and(|r| r.subscribe == Some(true))
                })
            })
            .cloned()
            .ok_or_else(|| {
                ErrorData::new(
                    ErrorCode::RESOURCE_NOT_FOUND,
                    format!("no upstream this actor sees offers subscriptions to {uri:?}"),
                    None,
                )
            })
    }

    pub(crate) async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let paging = Paging::new(&self.visible, |c| c.prompts.is_some(), request)?;
        let (items, next) = paging
            .walk(|v, cursor| {
                Box::pin(async move {
                    let request = ClientRequest::ListPromptsRequest(page_request(cursor));
                    match self.ask(v, request).await? {
                        ServerResult::ListPromptsResult(r) => {
                            let prompts = r
                                .prompts
                                .into_iter()
                                .map(|mut p| {
                                    p.name = format!("{}{}", v.prefix, p.name);
                                    p
                                })
                                .collect();
                            Ok((prompts, r.next_cursor))
                        }
                        _ => Err(unexpected(v.upstream.name())),
                    }
                })
            })
            .await?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The upstream whose prefix names `served` (the longest that does), and its own name.
    fn prompt_owner(&self, served: &str) -> Result<(&VisibleUpstream, String), ErrorData> {
        self.visible
            .iter()
            .filter(|v| served.starts_with(v.prefix.as_str()) && served.len() > v.prefix.len())
            .max_by_key(|v| v.prefix.len())
            .map(|v| (v, served[v.prefix.len()..].to_string()))
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("no prompt {served:?}: a prompt is named <upstream prefix><its name>, as prompts/list gives it"),
                    None,
                )
            })
    }

    pub(crate) async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
    ) -> Result<GetPromptResult, ErrorData> {
        let (v, own) = self.prompt_owner(&params.name)?;
        params.name = own;
        match self
            .ask(
                v,
                ClientRequest::GetPromptRequest(GetPromptRequest::new(params)),
            )
            .await?
        {
            ServerResult::GetPromptResult(r) => Ok(r),
            _ => Err(unexpected(v.upstream.name())),
        }
    }

    pub(crate) async fn complete(
        &self,
        mut params: CompleteRequestParams,
    ) -> Result<CompleteResult, ErrorData> {
        let v = match &mut params.r#ref {
            Reference::Prompt(p) => {
                let (v, own) = self.prompt_owner(&p.name)?;
                p.name = own;
                v.clone()
            }
            Reference::Resource(r) => self
                .routes
                .candidates(&r.uri, &self.visible)
                .into_iter()
                .find(|v| serves(v, |c| c.completions.is_some()))
                .cloned()
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("no upstream this actor sees completes {:?}", r.uri),
                        None,
                    )
                })?,
            _ => {
                return Err(ErrorData::invalid_params(
                    "a completion refers to a prompt or a resource",
                    None,
                ))
            }
        };
        match self
            .ask(
                &v,
                ClientRequest::CompleteRequest(CompleteRequest::new(params)),
            )
            .await?
        {
            ServerResult::CompleteResult(r) => Ok(r),
            _ => Err(unexpected(v.upstream.name())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::template_matches;

    #[test]
    fn templates_match_what_they_describe_and_nothing_else() {
        let t = "demo://resource/dynamic/text/{resourceId}";
        assert!(template_matches(t, "demo://resource/dynamic/text/42"));
        assert!(!template_matches(t, "demo://resource/dynamic/text/4/2"));
        assert!(!template_matches(t, "demo://resource/dynamic/blob/42"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches("x://{a}/{b}.json", "x://one/two.json"));
        assert!(!template_matches("x://{a}/{b}.json", "x://one/two.txt"));
        assert!(template_matches("plain://fixed", "plain://fixed"));
    }
}
