//! The cloud backend on AWS EC2 (cargo feature `aws`), through the official
//! SDK: it signs with SigV4 and walks the whole default credential chain
//! (environment, profile, web identity for IRSA, container credentials for
//! EKS Pod Identity, the instance metadata service), which a hand-written
//! client would have to redo. Its HTTPS client is rustls on ring, the crypto
//! kube and reqwest already use: no second crypto library in the binary.
//!
//! The SDK's configuration is loaded on the first request (loading is async
//! and may ask the instance metadata service for the region), so building the
//! backend never blocks. Each request takes a slot of the plugin's request
//! rate first (when bound to a plugin's call) and is bounded by
//! [`REQUEST_TIMEOUT`] and by what is left of the reconcile's deadline; the
//! SDK retries a failed attempt at most twice (standard retry, 3 attempts).

use super::backend::{
    CloudBackend, CloudLimits, Direction, EtherType, Instance, InstanceState, MAX_PAGES, OwnerTag,
    PortRange, Protocol, REQUEST_TIMEOUT, Remote, Rule, SecurityGroup,
};
use super::real::{Paced, Pacer};
use crate::capabilities::call::Call;
use crate::capabilities::error::CapError;
use crate::capabilities::gate::Permit;
use crate::text::peer_answer;
use anyhow::bail;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_ec2::Client;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::types::{self as ec2, Filter, InstanceStateName, IpPermission};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
    http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_types::body::SdkBody;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::OnceCell;

/// Items asked for per page of a listing (EC2's largest page).
const PAGE_SIZE: i32 = 1000;
/// Attempts of one request, the first included (the SDK's standard retry:
/// throttling, 5xx and transient network errors, with backoff).
const MAX_ATTEMPTS: u32 = 3;

/// Where the SDK looks for credentials, for messages that have to name a fix.
const CREDENTIAL_CHAIN: &str = "the AWS default credential chain: AWS_ACCESS_KEY_ID and \
     AWS_SECRET_ACCESS_KEY, the profile of AWS_PROFILE in ~/.aws, web identity \
     (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, as IRSA sets them), EKS Pod Identity \
     (AWS_CONTAINER_CREDENTIALS_FULL_URI), then the instance metadata service";

/// What every plugin's view shares.
struct Shared {
    region: Option<String>,
    endpoint: Option<String>,
    client: OnceCell<Client>,
    pacer: Pacer,
}

/// The EC2 backend, as the host or as one plugin's reconcile (`call`).
pub struct AwsCloud {
    shared: Arc<Shared>,
    paced: Option<Paced>,
}

impl AwsCloud {
    /// A backend for `[host.cloud] region` (else the SDK's region chain:
    /// AWS_REGION, the profile, the instance metadata service) and `endpoint`
    /// (else AWS_ENDPOINT_URL_EC2, else EC2's own), its requests paced and
    /// counted by `pacer`. Nothing is sent before the first call.
    pub fn new(
        region: Option<String>,
        endpoint: Option<String>,
        pacer: Pacer,
    ) -> anyhow::Result<AwsCloud> {
        if let Some(region) = &region {
            check_region(region)?;
        }
        Ok(AwsCloud {
            shared: Arc::new(Shared {
                region,
                endpoint,
                client: OnceCell::new(),
                pacer,
            }),
            paced: None,
        })
    }

    /// The client, its configuration loaded on first use, within the
    /// request's bounds (finding the region may ask the instance metadata
    /// service, which off EC2 only times out).
    async fn client(&self) -> Result<Client, CapError> {
        let shared = &self.shared;
        let within = self.paced.as_ref().map_or(REQUEST_TIMEOUT, |paced| {
            paced.call.remaining().min(REQUEST_TIMEOUT)
        });
        let load = || async {
            let load = connect(shared.region.clone(), shared.endpoint.clone());
            tokio::time::timeout(within, load).await.map_err(|_| {
                CapError::Timeout(format!(
                    "AWS EC2: loading the SDK's configuration (region, credential chain) took over {within:?}: set [host.cloud] region, or AWS_REGION, when the instance metadata service is out of reach"
                ))
            })?
        };
        shared.client.get_or_try_init(load).await.cloned()
    }

    /// Send one request of the backend's `operation` (a page counts as one;
    /// the SDK's retries of it do not): wait for a request slot, then bound it
    /// by the reconcile's deadline when that comes before [`REQUEST_TIMEOUT`]
    /// (the client's own bound). `action` is EC2's name, for messages.
    async fn send<T, E>(
        &self,
        operation: &'static str,
        action: &str,
        request: impl Future<Output = Result<T, SdkError<E>>>,
    ) -> Result<T, Failure>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let allowed = self
            .shared
            .pacer
            .slot(self.paced.as_ref(), operation)
            .await
            .map_err(Failure::host)?;
        let result = if allowed < REQUEST_TIMEOUT {
            tokio::time::timeout(allowed, request).await.map_err(|_| {
                Failure::host(CapError::Timeout(format!(
                    "EC2 {action}: the reconcile's deadline came first ({allowed:?} were left); raise the plugin's timeout or make fewer requests"
                )))
            })?
        } else {
            request.await
        };
        result.map_err(|e| failure(action, e))
    }

    /// The instance `id` as EC2 reports it now (None: no such instance).
    async fn describe_instance(
        &self,
        operation: &'static str,
        id: &str,
    ) -> Result<Option<ec2::Instance>, CapError> {
        let client = self.client().await?;
        let request = client.describe_instances().instance_ids(id).send();
        match self.send(operation, "DescribeInstances", request).await {
            Ok(output) => Ok(output
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find(|i| i.instance_id() == Some(id))
                .cloned()),
            Err(failure) if failure.is(INSTANCE_NOT_FOUND) => Ok(None),
            Err(failure) => Err(failure.error),
        }
    }

    /// Every security group matching `filters`, all pages.
    async fn groups_filtered(
        &self,
        operation: &'static str,
        filters: Vec<Filter>,
    ) -> Result<Vec<SecurityGroup>, CapError> {
        let client = self.client().await?;
        let groups = all_pages("DescribeSecurityGroups", |token| {
            let request = client
                .describe_security_groups()
                .set_filters(Some(filters.clone()))
                .max_results(PAGE_SIZE)
                .set_next_token(token)
                .send();
            async move {
                let output = self
                    .send(operation, "DescribeSecurityGroups", request)
                    .await?;
                Ok((
                    output.security_groups.unwrap_or_default(),
                    output.next_token,
                ))
            }
        })
        .await?;
        Ok(groups.iter().map(security_group_from).collect())
    }

    /// Read-modify-write of one network interface's groups (`groups`, read
    /// just before): its other groups stay. False when it already had
    /// `group_id`.
    async fn add_to_interface(
        &self,
        interface: &str,
        mut groups: Vec<String>,
        group_id: &str,
    ) -> Result<bool, CapError> {
        if groups.iter().any(|g| g == group_id) {
            return Ok(false);
        }
        groups.push(group_id.to_string());
        let client = self.client().await?;
        let request = client
            .modify_network_interface_attribute()
            .network_interface_id(interface)
            .set_groups(Some(groups))
            .send();
        self.send("add-to-group", "ModifyNetworkInterfaceAttribute", request)
            .await?;
        Ok(true)
    }
}

/// The network interfaces attached (or attaching) to `instance` as EC2
/// describes it, each with its group IDs: those are the instance's, and
/// only those are changed for it.
fn attached_interfaces(instance: &ec2::Instance) -> Vec<(String, Vec<String>)> {
    instance
        .network_interfaces()
        .iter()
        .filter(|eni| {
            eni.attachment().and_then(|a| a.status()).is_none_or(|s| {
                matches!(
                    s,
                    ec2::AttachmentStatus::Attached | ec2::AttachmentStatus::Attaching
                )
            })
        })
        .filter_map(|eni| {
            let id = eni.network_interface_id()?;
            let groups = eni
                .groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string));
            Some((id.to_string(), groups.collect()))
        })
        .collect()
}

/// `client` with every answer's body bounded while it is read at
/// [`crate::peer::MAX_PAGE`] (the SDK reads a page whole before parsing it,
/// so a 78 MB page would otherwise be held whole): past it the read fails
/// and the request is `unavailable` ([`failure`] names the bound).
fn bounded(client: SharedHttpClient) -> SharedHttpClient {
    #[derive(Debug)]
    struct Bounded(SharedHttpConnector);
    impl HttpConnector for Bounded {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let answer = self.0.call(request);
            HttpConnectorFuture::new(async move {
                let response = answer.await?;
                Ok(response.map(|body| {
                    SdkBody::from_body_1_x(http_body_util::Limited::new(
                        body,
                        crate::peer::MAX_PAGE as usize,
                    ))
                }))
            })
        }
    }
    http_client_fn(move |settings, components| {
        SharedHttpConnector::new(Bounded(client.http_connector(settings, components)))
    })
}

/// Whether `err` failed because an answer passed [`crate::peer::MAX_PAGE`].
fn too_large(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Load the SDK's configuration (credential chain, region chain) once.
async fn connect(region: Option<String>, endpoint: Option<String>) -> Result<Client, CapError> {
    let https = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(bounded(https))
        .retry_config(RetryConfig::standard().with_max_attempts(MAX_ATTEMPTS))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(REQUEST_TIMEOUT)
                .build(),
        );
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region));
    }
    if let Some(endpoint) = endpoint {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(CapError::Unavailable(
            "AWS EC2: no region: set [host.cloud] region, or AWS_REGION, or a region in the AWS profile (on EC2 the instance metadata service gives it)".into(),
        ));
    }
    Ok(Client::new(&config))
}

/// `[host.cloud] region`: "us-east-1", never a URL or a zone.
fn check_region(region: &str) -> anyhow::Result<()> {
    let valid = !region.is_empty()
        && region.len() <= 64
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        bail!(
            "[host.cloud] region {region:?}: expected an AWS region such as \"us-east-1\" (or leave it out for AWS_REGION or the instance metadata service)"
        );
    }
    Ok(())
}

#[async_trait::async_trait]
impl CloudBackend for AwsCloud {
    fn provider(&self) -> &'static str {
        "aws"
    }

    fn for_plugin(self: Arc<Self>, call: &Arc<Call>, limits: CloudLimits) -> Arc<dyn CloudBackend> {
        Arc::new(AwsCloud {
            shared: self.shared.clone(),
            paced: Some(Paced {
                call: call.clone(),
                limits,
            }),
        })
    }

    async fn list_instances(&self, owner: &OwnerTag) -> Result<Vec<Instance>, CapError> {
        let client = self.client().await?;
        let filter = Filter::builder()
            .name(format!("tag:{}", filter_literal(&owner.key)))
            .values(filter_literal(&owner.value))
            .build();
        let reservations = all_pages("DescribeInstances", |token| {
            let request = client
                .describe_instances()
                .filters(filter.clone())
                .max_results(PAGE_SIZE)
                .set_next_token(token)
                .send();
            async move {
                let output = self
                    .send("list-instances", "DescribeInstances", request)
                    .await?;
                Ok((output.reservations.unwrap_or_default(), output.next_token))
            }
        })
        .await?;
        // The filter already matched; checking the tag again keeps a filter
        // EC2 reads differently from ever widening what a plugin sees.
        reservations
            .iter()
            .flat_map(|r| r.instances())
            .filter(|i| {
                i.tags().iter().any(|t| {
                    t.key() == Some(owner.key.as_str()) && t.value() == Some(owner.value.as_str())
                })
            })
            .map(instance_from)
            .collect()
    }

    async fn get_instance(&self, id: &str) -> Result<Option<Instance>, CapError> {
        self.describe_instance("get-instance", id)
            .await?
            .as_ref()
            .map(instance_from)
            .transpose()
    }

    async fn delete_instance(&self, _permit: Permit, id: &str) -> Result<(), CapError> {
        let client = self.client().await?;
        let request = client.terminate_instances().instance_ids(id).send();
        match self
            .send("delete-instance", "TerminateInstances", request)
            .await
        {
            Ok(_) => Ok(()),
            Err(failure) if failure.is(INSTANCE_NOT_FOUND) => Ok(()),
            Err(failure) => Err(failure.error),
        }
    }

    async fn list_security_groups(&self, ids: &[String]) -> Result<Vec<SecurityGroup>, CapError> {
        if ids.is_empty() {
            // No IDs would ask EC2 for every group of the account.
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        // By IDs EC2 answers in one page (MaxResults is not allowed with
        // them), but fails whole when one of them does not exist: then the
        // `group-id` filter answers with only those that do.
        let request = client
            .describe_security_groups()
            .set_group_ids(Some(ids.to_vec()))
            .send();
        let groups = match self
            .send("list-security-groups", "DescribeSecurityGroups", request)
            .await
        {
            Ok(output) => {
                if output.next_token().is_some() {
                    return Err(CapError::Unavailable(
                        "EC2 DescribeSecurityGroups by group IDs answered with a next page, which it never does: refusing a partial list".into(),
                    ));
                }
                output
                    .security_groups()
                    .iter()
                    .map(security_group_from)
                    .collect()
            }
            Err(failure) if failure.is(GROUP_NOT_FOUND) => {
                let by_id = Filter::builder()
                    .name("group-id")
                    .set_values(Some(ids.to_vec()))
                    .build();
                self.groups_filtered("list-security-groups", vec![by_id])
                    .await?
            }
            Err(failure) => return Err(failure.error),
        };
        Ok(groups.into_iter().filter(|g| ids.contains(&g.id)).collect())
    }

    async fn find_security_groups(&self, name: &str) -> Result<Vec<SecurityGroup>, CapError> {
        let by_name = Filter::builder()
            .name("group-name")
            .values(filter_literal(name))
            .build();
        let groups = self
            .groups_filtered("find-security-group", vec![by_name])
            .await?;
        Ok(groups.into_iter().filter(|g| g.name == name).collect())
    }

    async fn ensure_rule(
        &self,
        _permit: Permit,
        group_id: &str,
        rule: &Rule,
    ) -> Result<bool, CapError> {
        let client = self.client().await?;
        let permission = permission_from(rule);
        let sent = match rule.direction {
            Direction::Ingress => {
                let request = client
                    .authorize_security_group_ingress()
                    .group_id(group_id)
                    .ip_permissions(permission)
                    .send();
                self.send("ensure-rule", "AuthorizeSecurityGroupIngress", request)
                    .await
                    .map(drop)
            }
            Direction::Egress => {
                let request = client
                    .authorize_security_group_egress()
                    .group_id(group_id)
                    .ip_permissions(permission)
                    .send();
                self.send("ensure-rule", "AuthorizeSecurityGroupEgress", request)
                    .await
                    .map(drop)
            }
        };
        match sent {
            Ok(()) => Ok(true),
            Err(failure) if failure.is(DUPLICATE_RULE) => Ok(false),
            Err(failure) => Err(failure.error),
        }
    }

    async fn add_to_group(
        &self,
        _permit: Permit,
        instance: &Instance,
        group_id: &str,
    ) -> Result<bool, CapError> {
        // Per network interface: EC2 refuses ModifyInstanceAttribute's groups
        // for an instance with more than one (every VPC-CNI node past its first
        // ENI's addresses). The interfaces are the ones EC2 describes under this
        // instance now, not the listing the plugin decided on.
        let Some(current) = self.describe_instance("add-to-group", &instance.id).await? else {
            return Err(CapError::NotFound(format!(
                "EC2 instance {} no longer exists",
                instance.id
            )));
        };
        let interfaces = attached_interfaces(&current);
        if interfaces.is_empty() {
            return Err(CapError::Conflict(format!(
                "cloud add-to-group: EC2 instance {} has no attached network interface to put in {group_id}",
                instance.id
            )));
        }
        let mut added = false;
        for (interface, groups) in interfaces {
            added |= self.add_to_interface(&interface, groups, group_id).await?;
        }
        Ok(added)
    }

    fn requests(&self) -> u64 {
        self.shared.pacer.requests()
    }

    fn rate_metrics(&self, configured: &dyn Fn(&str) -> bool) -> String {
        self.shared.pacer.render(self.provider(), configured)
    }
}

const INSTANCE_NOT_FOUND: &[&str] = &["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"];
const GROUP_NOT_FOUND: &[&str] = &["InvalidGroup.NotFound", "InvalidGroupId.Malformed"];
const DUPLICATE_RULE: &[&str] = &["InvalidPermission.Duplicate"];

/// A failed request: EC2's error code (when it answered one) and the
/// capability error it becomes.
#[derive(Debug)]
struct Failure {
    code: Option<String>,
    error: CapError,
}

impl Failure {
    /// A refusal of the host's own (rate, deadline): no request was answered.
    fn host(error: CapError) -> Failure {
        Failure { code: None, error }
    }

    fn is(&self, codes: &[&str]) -> bool {
        self.code.as_deref().is_some_and(|c| codes.contains(&c))
    }
}

impl From<Failure> for CapError {
    fn from(failure: Failure) -> CapError {
        failure.error
    }
}

/// What EC2's error codes mean to a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorClass {
    NotFound,
    /// Throttled, or EC2 itself failing: try again later.
    Busy,
    /// The credentials were refused.
    Credentials,
    /// The credentials are fine but their policy does not allow the action.
    Permission,
    Invalid,
    Conflict,
    Other,
}

fn classify(code: &str) -> ErrorClass {
    match code {
        c if c.ends_with(".NotFound") => ErrorClass::NotFound,
        "RequestLimitExceeded"
        | "Throttling"
        | "ThrottlingException"
        | "TooManyRequestsException"
        | "ServiceUnavailable"
        | "Unavailable"
        | "InternalError"
        | "InternalFailure"
        | "InsufficientInstanceCapacity"
        // A page token EC2 no longer honours (expired): the next listing
        // starts over; sending the same token again is futile.
        | "InvalidPaginationToken" => ErrorClass::Busy,
        "AuthFailure"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch"
        | "ExpiredToken"
        | "RequestExpired"
        | "IncompleteSignature"
        | "MissingAuthenticationToken"
        | "OptInRequired"
        | "Blocked" => ErrorClass::Credentials,
        "UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException" => {
            ErrorClass::Permission
        }
        c if c.starts_with("InvalidParameter")
            || c.ends_with(".Malformed")
            || c == "InvalidPermission.Malformed"
            || c == "MissingParameter" =>
        {
            ErrorClass::Invalid
        }
        "IncorrectInstanceState"
        | "IncorrectState"
        | "DependencyViolation"
        | "RulesPerSecurityGroupLimitExceeded"
        | "SecurityGroupsPerInstanceLimitExceeded" => ErrorClass::Conflict,
        _ => ErrorClass::Other,
    }
}

fn failure<E>(operation: &str, err: SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let code = err.code().map(str::to_string);
    let status = err.raw_response().map(|r| r.status().as_u16());
    let error = match (&err, code.as_deref()) {
        _ if too_large(&err) => CapError::Unavailable(format!(
            "EC2 {operation}: an answer larger than {} bytes: refused (one page is never that large: is [host.cloud] endpoint EC2?)",
            crate::peer::MAX_PAGE
        )),
        (SdkError::TimeoutError(_), _) => CapError::Timeout(format!(
            "EC2 {operation} did not complete within {REQUEST_TIMEOUT:?} ({MAX_ATTEMPTS} attempts at most)"
        )),
        (SdkError::DispatchFailure(dispatch), _) => {
            if let Some(credentials) = credentials_error(&err) {
                CapError::Unavailable(format!(
                    "EC2 {operation}: no AWS credentials ({}): provide them through {CREDENTIAL_CHAIN}",
                    causes(credentials).replace("\n  ", "; ")
                ))
            } else if dispatch.is_timeout() {
                CapError::Timeout(format!(
                    "EC2 {operation}: connecting timed out: {}",
                    causes(&err)
                ))
            } else {
                CapError::Unavailable(format!(
                    "EC2 {operation}: cannot reach EC2 (check [host.cloud] endpoint and region, and the network): {}",
                    causes(&err)
                ))
            }
        }
        (_, Some(code)) => {
            let message = format!(
                "EC2 {operation}: {}: {}",
                peer_answer(code.as_bytes()),
                peer_answer(err.message().unwrap_or("no message").as_bytes())
            );
            match classify(code) {
                ErrorClass::NotFound => CapError::NotFound(message),
                ErrorClass::Busy => CapError::Unavailable(format!("{message} (try again later)")),
                ErrorClass::Credentials => CapError::Unavailable(format!(
                    "{message}: EC2 refused the credentials found through {CREDENTIAL_CHAIN}"
                )),
                ErrorClass::Permission => CapError::Unavailable(format!(
                    "{message}: allow ec2:{operation} in the IAM policy of the node's role (or of the credentials found through {CREDENTIAL_CHAIN})"
                )),
                ErrorClass::Invalid => CapError::Invalid(message),
                ErrorClass::Conflict => CapError::Conflict(message),
                ErrorClass::Other => CapError::Other(message),
            }
        }
        // An answer without an EC2 error code: a proxy, a load balancer, or
        // an endpoint that is not EC2.
        (_, None) => match status {
            Some(status @ (429 | 500..)) => CapError::Unavailable(format!(
                "EC2 {operation}: HTTP {status} without an EC2 error (try again later)"
            )),
            Some(status) => CapError::Other(format!(
                "EC2 {operation}: HTTP {status} without an EC2 error: is [host.cloud] endpoint an EC2 endpoint?"
            )),
            None => CapError::Other(format!("EC2 {operation}: {}", causes(&err))),
        },
    };
    Failure { code, error }
}

/// An error and its causes, one after the other ("dispatch failure: io
/// error: ... Connection refused"), without the SDK's debug dump.
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}

/// The credential chain's error, when that is why a request was not sent.
fn credentials_error<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a aws_credential_types::provider::error::CredentialsError> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(credentials) = e.downcast_ref() {
            return Some(credentials);
        }
        next = e.source();
    }
    None
}

/// EC2 filter values treat `*` and `?` as wildcards: a tag or name is matched
/// literally, with them (and the escape itself) escaped.
fn filter_literal(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Every item of a listing, following page tokens: all pages or an error,
/// never a partial list. A token seen before (a provider going in circles),
/// more than [`MAX_PAGES`] pages or a failing page fails the whole listing.
async fn all_pages<T, F, Fut>(operation: &str, mut fetch_page: F) -> Result<Vec<T>, CapError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), CapError>>,
{
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let mut token = None;
    for page in 1..=MAX_PAGES {
        let (page_items, next) = fetch_page(token.take()).await.map_err(|e| {
            e.map_message(|m| format!("{m} (page {page} of the listing: no partial list)"))
        })?;
        items.extend(page_items);
        match next.filter(|t| !t.is_empty()) {
            None => return Ok(items),
            Some(next) if !seen.insert(next.clone()) => {
                return Err(CapError::Unavailable(format!(
                    "EC2 {operation} answered page {page} with a page token it had already given: refusing a partial list"
                )));
            }
            Some(next) => token = Some(next),
        }
    }
    Err(CapError::Unavailable(format!(
        "EC2 {operation} still had more pages after {MAX_PAGES}: refusing a partial list"
    )))
}

/// EC2's state name in the provider-neutral words.
fn instance_state(name: &InstanceStateName) -> InstanceState {
    match name {
        InstanceStateName::Pending => InstanceState::Pending,
        InstanceStateName::Running => InstanceState::Running,
        InstanceStateName::Stopping | InstanceStateName::Stopped => InstanceState::Stopped,
        InstanceStateName::ShuttingDown => InstanceState::Deleting,
        InstanceStateName::Terminated => InstanceState::Terminated,
        _ => InstanceState::Unknown,
    }
}

/// What Kubernetes writes into an EC2 node's `spec.providerID`.
fn provider_id(zone: Option<&str>, id: &str) -> String {
    format!("aws:///{}/{id}", zone.unwrap_or_default())
}

/// The groups `instance` is in: those every attached network interface is
/// in (a group on only some of them leaves the others open, and
/// `add-to-group` completes it), in the first interface's order; the
/// instance's own list when EC2 describes no interface.
fn member_of(instance: &ec2::Instance) -> Vec<String> {
    let interfaces = attached_interfaces(instance);
    let Some(((_, first), rest)) = interfaces.split_first() else {
        return instance
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
    };
    first
        .iter()
        .filter(|g| rest.iter().all(|(_, groups)| groups.contains(g)))
        .cloned()
        .collect()
}

fn instance_from(i: &ec2::Instance) -> Result<Instance, CapError> {
    let Some(id) = i.instance_id() else {
        return Err(CapError::Other(
            "EC2 DescribeInstances answered an instance without an ID".into(),
        ));
    };
    let tags: Vec<(String, String)> = i
        .tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let name = tags
        .iter()
        .find(|(k, _)| k == "Name")
        .map(|(_, v)| v.as_str())
        .or(i.private_dns_name())
        .unwrap_or_default()
        .to_string();
    let state_name = i.state().and_then(|s| s.name());
    let zone = i
        .placement()
        .and_then(|p| p.availability_zone())
        .map(str::to_string);
    let mut private = Vec::new();
    let mut add_private = |address: Option<&str>| {
        if let Some(address) = address.filter(|a| !a.is_empty())
            && !private.iter().any(|a| a == address)
        {
            private.push(address.to_string());
        }
    };
    add_private(i.private_ip_address());
    for eni in i.network_interfaces() {
        for address in eni.private_ip_addresses() {
            add_private(address.private_ip_address());
        }
        for address in eni.ipv6_addresses() {
            add_private(address.ipv6_address());
        }
    }
    Ok(Instance {
        id: id.to_string(),
        name,
        state: state_name.map_or(InstanceState::Unknown, instance_state),
        status: state_name
            .map(|s| s.as_str())
            .unwrap_or_default()
            .to_string(),
        task_state: None,
        created_at_ms: i
            .launch_time()
            .and_then(|t| t.to_millis().ok())
            .unwrap_or_default(),
        provider_id: provider_id(zone.as_deref(), id),
        zone,
        private_addresses: private,
        public_addresses: i
            .public_ip_address()
            .into_iter()
            .map(str::to_string)
            .collect(),
        security_groups: member_of(i),
        tags,
    })
}

fn security_group_from(g: &ec2::SecurityGroup) -> SecurityGroup {
    let ingress = g
        .ip_permissions()
        .iter()
        .flat_map(|p| rules_from(Direction::Ingress, p));
    let egress = g
        .ip_permissions_egress()
        .iter()
        .flat_map(|p| rules_from(Direction::Egress, p));
    SecurityGroup {
        id: g.group_id().unwrap_or_default().to_string(),
        name: g.group_name().unwrap_or_default().to_string(),
        description: g.description().unwrap_or_default().to_string(),
        rules: ingress.chain(egress).collect(),
    }
}

/// EC2's `IpProtocol`: "-1", a name, or a number.
fn protocol_from(text: &str) -> Option<Protocol> {
    Some(match text.to_ascii_lowercase().as_str() {
        "-1" | "all" => Protocol::Any,
        "tcp" | "6" => Protocol::Tcp,
        "udp" | "17" => Protocol::Udp,
        "icmp" | "1" => Protocol::Icmp,
        "icmpv6" | "58" => Protocol::Icmpv6,
        number => Protocol::Number(number.parse().ok()?),
    })
}

fn protocol_text(protocol: Protocol) -> String {
    match protocol {
        Protocol::Any => "-1".into(),
        Protocol::Tcp | Protocol::Number(6) => "tcp".into(),
        Protocol::Udp | Protocol::Number(17) => "udp".into(),
        Protocol::Icmp | Protocol::Number(1) => "icmp".into(),
        Protocol::Icmpv6 | Protocol::Number(58) => "icmpv6".into(),
        Protocol::Number(n) => n.to_string(),
    }
}

/// EC2's FromPort/ToPort as the WIT's range. Ok(None): every port (or type
/// and code); Err: a range the WIT cannot say (an ICMP type with every code).
fn ports_from(
    protocol: Protocol,
    from: Option<i32>,
    to: Option<i32>,
) -> Result<Option<PortRange>, ()> {
    let as_u16 = |n: Option<i32>| n.and_then(|n| u16::try_from(n).ok());
    match protocol {
        Protocol::Tcp | Protocol::Udp => match (as_u16(from), as_u16(to)) {
            (Some(0 | 1), Some(65535)) | (None, _) | (_, None) => Ok(None),
            (Some(min), Some(max)) => Ok(Some(PortRange { min, max })),
        },
        Protocol::Icmp | Protocol::Icmpv6 => match (as_u16(from), as_u16(to)) {
            (None, None) => Ok(None),
            (Some(kind), Some(code)) => Ok(Some(PortRange {
                min: kind,
                max: code,
            })),
            _ => Err(()),
        },
        Protocol::Any | Protocol::Number(_) => Ok(None),
    }
}

/// One rule per remote of an EC2 permission (an IPv4 range, an IPv6 range, a
/// group). What the WIT cannot say is left out: prefix lists, an ICMP type
/// with every code, an unknown protocol name.
fn rules_from(direction: Direction, p: &IpPermission) -> Vec<Rule> {
    let Some(protocol) = p.ip_protocol().and_then(protocol_from) else {
        return Vec::new();
    };
    let Ok(ports) = ports_from(protocol, p.from_port(), p.to_port()) else {
        return Vec::new();
    };
    let rule = |ether_type, remote, description: Option<&str>| Rule {
        direction,
        ether_type,
        protocol,
        ports,
        remote,
        description: description.map(str::to_string),
    };
    let v4 = p.ip_ranges().iter().filter_map(|r| {
        let cidr = r.cidr_ip()?;
        Some(rule(
            EtherType::Ipv4,
            Remote::Cidr(cidr.into()),
            r.description(),
        ))
    });
    let v6 = p.ipv6_ranges().iter().filter_map(|r| {
        let cidr = r.cidr_ipv6()?;
        Some(rule(
            EtherType::Ipv6,
            Remote::Cidr(cidr.into()),
            r.description(),
        ))
    });
    let groups = p.user_id_group_pairs().iter().filter_map(|g| {
        let id = g.group_id()?;
        Some(rule(
            EtherType::Ipv4,
            Remote::Group(id.into()),
            g.description(),
        ))
    });
    v4.chain(v6).chain(groups).collect()
}

/// The one EC2 permission that adds `rule`.
fn permission_from(rule: &Rule) -> IpPermission {
    let (from, to) = match (rule.protocol, rule.ports) {
        (Protocol::Tcp | Protocol::Udp, None) => (Some(0), Some(65535)),
        (Protocol::Icmp | Protocol::Icmpv6, None) => (Some(-1), Some(-1)),
        (_, Some(PortRange { min, max })) => (Some(i32::from(min)), Some(i32::from(max))),
        (Protocol::Any | Protocol::Number(_), None) => (None, None),
    };
    let permission = IpPermission::builder()
        .ip_protocol(protocol_text(rule.protocol))
        .set_from_port(from)
        .set_to_port(to);
    let description = rule.description.clone();
    match (&rule.remote, rule.ether_type) {
        (Remote::Cidr(cidr), EtherType::Ipv4) => permission.ip_ranges(
            ec2::IpRange::builder()
                .cidr_ip(cidr)
                .set_description(description)
                .build(),
        ),
        (Remote::Cidr(cidr), EtherType::Ipv6) => permission.ipv6_ranges(
            ec2::Ipv6Range::builder()
                .cidr_ipv6(cidr)
                .set_description(description)
                .build(),
        ),
        (Remote::Group(id), _) => permission.user_id_group_pairs(
            ec2::UserIdGroupPair::builder()
                .group_id(id)
                .set_description(description)
                .build(),
        ),
    }
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    fn rule(protocol: Protocol, ports: Option<(u16, u16)>, remote: Remote) -> Rule {
        Rule {
            direction: Direction::Ingress,
            ether_type: match &remote {
                Remote::Cidr(c) if c.contains(':') => EtherType::Ipv6,
                _ => EtherType::Ipv4,
            },
            protocol,
            ports: ports.map(|(min, max)| PortRange { min, max }),
            remote,
            description: Some("from tend".into()),
        }
    }

    fn cidr(text: &str) -> Remote {
        Remote::Cidr(text.into())
    }

    #[test]
    fn rules_survive_the_round_trip_through_a_permission() {
        let rules = [
            rule(Protocol::Tcp, Some((22, 22)), cidr("10.0.0.0/8")),
            rule(Protocol::Tcp, None, cidr("10.0.0.0/8")),
            rule(Protocol::Udp, Some((30000, 32767)), cidr("fd00::/8")),
            rule(Protocol::Icmp, Some((8, 0)), cidr("0.0.0.0/0")),
            rule(Protocol::Icmp, None, cidr("0.0.0.0/0")),
            rule(Protocol::Icmpv6, None, cidr("::/0")),
            rule(
                Protocol::Any,
                None,
                Remote::Group("sg-0123456789abcdef0".into()),
            ),
            rule(Protocol::Number(47), None, cidr("192.168.0.0/16")),
        ];
        for original in rules {
            let mut egress = original.clone();
            egress.direction = Direction::Egress;
            for rule in [original, egress] {
                let permission = permission_from(&rule);
                assert_eq!(rules_from(rule.direction, &permission), vec![rule.clone()]);
            }
        }
    }

    #[test]
    fn permissions_say_ranges_and_protocols_as_ec2_does() {
        let tcp_all = permission_from(&rule(Protocol::Tcp, None, cidr("10.0.0.0/8")));
        assert_eq!(
            (
                tcp_all.ip_protocol(),
                tcp_all.from_port(),
                tcp_all.to_port()
            ),
            (Some("tcp"), Some(0), Some(65535))
        );
        let icmp_all = permission_from(&rule(Protocol::Icmp, None, cidr("10.0.0.0/8")));
        assert_eq!(
            (icmp_all.from_port(), icmp_all.to_port()),
            (Some(-1), Some(-1))
        );
        let any = permission_from(&rule(Protocol::Any, None, cidr("10.0.0.0/8")));
        assert_eq!((any.ip_protocol(), any.from_port()), (Some("-1"), None));
        let by_number = permission_from(&rule(
            Protocol::Number(6),
            Some((80, 80)),
            cidr("10.0.0.0/8"),
        ));
        assert_eq!(by_number.ip_protocol(), Some("tcp"));
        let group = permission_from(&rule(Protocol::Tcp, None, Remote::Group("sg-1".into())));
        assert_eq!(group.user_id_group_pairs()[0].group_id(), Some("sg-1"));
        assert_eq!(
            group.user_id_group_pairs()[0].description(),
            Some("from tend")
        );
        assert!(group.ip_ranges().is_empty());
    }

    #[test]
    fn ec2_permissions_become_one_rule_per_remote() {
        let permission = IpPermission::builder()
            .ip_protocol("6")
            .from_port(1)
            .to_port(65535)
            .ip_ranges(ec2::IpRange::builder().cidr_ip("10.0.0.0/8").build())
            .ipv6_ranges(ec2::Ipv6Range::builder().cidr_ipv6("fd00::/8").build())
            .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id("sg-2").build())
            .prefix_list_ids(ec2::PrefixListId::builder().prefix_list_id("pl-1").build())
            .build();
        let rules = rules_from(Direction::Egress, &permission);
        let shapes: Vec<_> = rules
            .iter()
            .map(|r| {
                (
                    r.direction,
                    r.ether_type,
                    r.protocol,
                    r.ports,
                    r.remote.clone(),
                )
            })
            .collect();
        assert_eq!(
            shapes,
            vec![
                (
                    Direction::Egress,
                    EtherType::Ipv4,
                    Protocol::Tcp,
                    None,
                    cidr("10.0.0.0/8")
                ),
                (
                    Direction::Egress,
                    EtherType::Ipv6,
                    Protocol::Tcp,
                    None,
                    cidr("fd00::/8")
                ),
                (
                    Direction::Egress,
                    EtherType::Ipv4,
                    Protocol::Tcp,
                    None,
                    Remote::Group("sg-2".into())
                ),
            ],
            "a tcp rule over every port is ports None; prefix lists are left out"
        );
        let every_code = IpPermission::builder()
            .ip_protocol("icmp")
            .from_port(8)
            .to_port(-1)
            .ip_ranges(ec2::IpRange::builder().cidr_ip("0.0.0.0/0").build())
            .build();
        assert!(rules_from(Direction::Ingress, &every_code).is_empty());
        let unknown = IpPermission::builder().ip_protocol("sctp-ish").build();
        assert!(rules_from(Direction::Ingress, &unknown).is_empty());
    }

    #[test]
    fn states_map_to_the_neutral_words() {
        let cases = [
            ("pending", InstanceState::Pending),
            ("running", InstanceState::Running),
            ("stopping", InstanceState::Stopped),
            ("stopped", InstanceState::Stopped),
            ("shutting-down", InstanceState::Deleting),
            ("terminated", InstanceState::Terminated),
            ("hibernating-someday", InstanceState::Unknown),
        ];
        for (name, state) in cases {
            assert_eq!(
                instance_state(&InstanceStateName::from(name)),
                state,
                "{name}"
            );
        }
    }

    #[test]
    fn an_instance_maps_with_every_address_and_its_provider_id() {
        let eni = ec2::InstanceNetworkInterface::builder()
            .private_ip_addresses(
                ec2::InstancePrivateIpAddress::builder()
                    .private_ip_address("10.0.0.5")
                    .build(),
            )
            .private_ip_addresses(
                ec2::InstancePrivateIpAddress::builder()
                    .private_ip_address("10.0.0.6")
                    .build(),
            )
            .ipv6_addresses(
                ec2::InstanceIpv6Address::builder()
                    .ipv6_address("fd00::5")
                    .build(),
            )
            .groups(group("sg-1"))
            .build();
        let instance = ec2::Instance::builder()
            .instance_id("i-0123456789abcdef0")
            .state(
                ec2::InstanceState::builder()
                    .name(InstanceStateName::ShuttingDown)
                    .build(),
            )
            .launch_time(aws_sdk_ec2::primitives::DateTime::from_millis(
                1_700_000_000_000,
            ))
            .placement(
                ec2::Placement::builder()
                    .availability_zone("us-east-1a")
                    .build(),
            )
            .private_ip_address("10.0.0.5")
            .private_dns_name("ip-10-0-0-5.ec2.internal")
            .public_ip_address("203.0.113.7")
            .network_interfaces(eni)
            .security_groups(ec2::GroupIdentifier::builder().group_id("sg-1").build())
            .tags(
                ec2::Tag::builder()
                    .key("kubernetes.io/cluster/prod")
                    .value("owned")
                    .build(),
            )
            .build();
        let mapped = instance_from(&instance).unwrap();
        assert_eq!(
            mapped.name, "ip-10-0-0-5.ec2.internal",
            "no Name tag: the private DNS name"
        );
        assert_eq!(mapped.state, InstanceState::Deleting);
        assert_eq!(mapped.status, "shutting-down");
        assert_eq!(mapped.created_at_ms, 1_700_000_000_000);
        assert_eq!(mapped.zone.as_deref(), Some("us-east-1a"));
        assert_eq!(
            mapped.private_addresses,
            ["10.0.0.5", "10.0.0.6", "fd00::5"]
        );
        assert_eq!(mapped.public_addresses, ["203.0.113.7"]);
        assert_eq!(mapped.security_groups, ["sg-1"]);
        assert_eq!(mapped.provider_id, "aws:///us-east-1a/i-0123456789abcdef0");
        let mut named = instance.clone();
        named.tags = Some(vec![
            ec2::Tag::builder().key("Name").value("worker-1").build(),
        ]);
        assert_eq!(instance_from(&named).unwrap().name, "worker-1");
    }

    fn group(id: &str) -> ec2::GroupIdentifier {
        ec2::GroupIdentifier::builder().group_id(id).build()
    }

    fn interface(
        id: &str,
        status: ec2::AttachmentStatus,
        groups: &[&str],
    ) -> ec2::InstanceNetworkInterface {
        ec2::InstanceNetworkInterface::builder()
            .network_interface_id(id)
            .attachment(
                ec2::InstanceNetworkInterfaceAttachment::builder()
                    .status(status)
                    .build(),
            )
            .set_groups(Some(groups.iter().map(|g| group(g)).collect()))
            .build()
    }

    #[test]
    fn an_instance_is_in_the_groups_every_attached_interface_is_in() {
        use ec2::AttachmentStatus::{Attached, Attaching, Detaching};
        let instance = ec2::Instance::builder()
            .instance_id("i-0123456789abcdef0")
            // EC2's instance-level list names the primary interface's groups.
            .security_groups(group("sg-a"))
            .security_groups(group("sg-b"))
            .network_interfaces(interface("eni-1", Attached, &["sg-a", "sg-b"]))
            .network_interfaces(interface("eni-2", Attaching, &["sg-c", "sg-b"]))
            .network_interfaces(interface("eni-3", Detaching, &["sg-d"]))
            .build();
        assert_eq!(
            attached_interfaces(&instance),
            [
                (
                    "eni-1".to_string(),
                    vec!["sg-a".to_string(), "sg-b".to_string()]
                ),
                (
                    "eni-2".to_string(),
                    vec!["sg-c".to_string(), "sg-b".to_string()]
                ),
            ],
            "an interface being detached is no longer the instance's"
        );
        assert_eq!(
            member_of(&instance),
            ["sg-b"],
            "sg-a is on one interface only: add-to-group has work left"
        );
        let no_interfaces = ec2::Instance::builder()
            .security_groups(group("sg-a"))
            .build();
        assert_eq!(member_of(&no_interfaces), ["sg-a"]);
    }

    /// One scripted answer: the page's items and the next page's token.
    type Page = Result<(Vec<u32>, Option<String>), CapError>;
    /// The tokens each request carried.
    type Asked = Arc<Mutex<Vec<Option<String>>>>;

    fn page(items: &[u32], next: Option<&str>) -> Page {
        Ok((items.to_vec(), next.map(str::to_string)))
    }

    /// Pages answered in order, and the tokens each request carried.
    fn script(
        pages: Vec<Page>,
    ) -> (
        impl FnMut(Option<String>) -> std::future::Ready<Page>,
        Asked,
    ) {
        let asked = Asked::default();
        let log = asked.clone();
        let mut pages: VecDeque<_> = pages.into();
        let fetch = move |token: Option<String>| {
            log.lock().unwrap().push(token);
            std::future::ready(
                pages
                    .pop_front()
                    .expect("asked past the last scripted page"),
            )
        };
        (fetch, asked)
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_end() {
        let (fetch, asked) = script(vec![
            page(&[1, 2], Some("a")),
            page(&[3], Some("b")),
            page(&[4], Some("")),
        ]);
        assert_eq!(all_pages("Op", fetch).await.unwrap(), [1, 2, 3, 4]);
        assert_eq!(
            *asked.lock().unwrap(),
            [None, Some("a".to_string()), Some("b".to_string())]
        );
    }

    #[tokio::test]
    async fn a_repeated_token_fails_the_listing() {
        let (fetch, _) = script(vec![
            page(&[1], Some("a")),
            page(&[2], Some("b")),
            page(&[3], Some("a")),
        ]);
        let err = all_pages("DescribeInstances", fetch).await.unwrap_err();
        assert_eq!(err.kind(), "unavailable");
        assert!(err.message().contains("page 3"), "{err}");
        assert!(err.message().contains("already given"), "{err}");
    }

    #[tokio::test]
    async fn a_failing_page_fails_the_listing() {
        let (fetch, _) = script(vec![
            page(&[1], Some("a")),
            Err(CapError::Other(
                "EC2 DescribeInstances: InternalError".into(),
            )),
        ]);
        let err = all_pages("DescribeInstances", fetch).await.unwrap_err();
        assert_eq!(err.kind(), "other");
        assert!(err.message().contains("page 2 of the listing"), "{err}");
    }

    #[tokio::test]
    async fn a_listing_that_never_ends_fails() {
        let mut page = 0u32;
        let fetch = move |_| {
            page += 1;
            std::future::ready(Ok((vec![page], Some(format!("t{page}")))))
        };
        let err = all_pages("DescribeInstances", fetch).await.unwrap_err();
        assert!(
            err.message().contains(&format!("after {MAX_PAGES}")),
            "{err}"
        );
    }

    #[test]
    fn error_codes_are_classified() {
        assert_eq!(classify("InvalidInstanceID.NotFound"), ErrorClass::NotFound);
        assert_eq!(classify("InvalidGroup.NotFound"), ErrorClass::NotFound);
        assert_eq!(classify("RequestLimitExceeded"), ErrorClass::Busy);
        assert_eq!(classify("AuthFailure"), ErrorClass::Credentials);
        assert_eq!(classify("UnauthorizedOperation"), ErrorClass::Permission);
        assert_eq!(classify("InvalidParameterValue"), ErrorClass::Invalid);
        assert_eq!(classify("InvalidPermission.Duplicate"), ErrorClass::Other);
        assert_eq!(classify("IncorrectInstanceState"), ErrorClass::Conflict);
        assert_eq!(classify("InvalidPaginationToken"), ErrorClass::Busy);
    }

    #[test]
    fn filter_values_are_literal() {
        assert_eq!(
            filter_literal("kubernetes.io/cluster/prod"),
            "kubernetes.io/cluster/prod"
        );
        assert_eq!(filter_literal("own*d?\\"), "own\\*d\\?\\\\");
    }

    #[test]
    fn the_region_is_checked_before_any_request() {
        let pacer = || Pacer::new(20, 40);
        assert!(AwsCloud::new(Some("us-east-1".into()), None, pacer()).is_ok());
        let err = AwsCloud::new(Some("us-east-1a/".into()), None, pacer())
            .err()
            .unwrap();
        assert!(err.to_string().contains("[host.cloud] region"), "{err}");
    }

    #[test]
    fn provider_ids_are_what_kubernetes_writes() {
        assert_eq!(
            provider_id(Some("eu-west-1b"), "i-1"),
            "aws:///eu-west-1b/i-1"
        );
    }
}
