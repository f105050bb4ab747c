//! The host's adapters and the SDK's fakes decide every shared grant case the
//! same way, with the same message: a plugin's unit tests see what the real
//! host would answer.

use super::files::PluginFiles;
use super::http::{HttpRequest, PluginHttp};
use super::testing::call;
use super::{CapError, Capability};
use tend_grants::Refusal;
use tend_grants::conformance::{self, Case, Expect, Op};

fn decision(result: Result<(), (Option<&'static str>, String)>) -> Expect {
    match result {
        Err((Some("denied"), m)) => Expect::Refused(Refusal::Denied(m)),
        Err((Some("invalid"), m)) => Expect::Refused(Refusal::Invalid(m)),
        _ => Expect::Allowed,
    }
}

fn host_side(error: CapError) -> (Option<&'static str>, String) {
    let kind = error.kind();
    let message = match error {
        CapError::Denied(m) | CapError::Invalid(m) => m,
        other => other.to_string(),
    };
    (Some(kind), message)
}

async fn on_the_host(case: &Case) -> Expect {
    let call = call(conformance::PLUGIN, false);
    let (backend, _) = PluginFiles::fake();
    let files = PluginFiles::for_call(&backend, &case.files, &call);
    let (backend, _) = PluginHttp::fake();
    let http = PluginHttp::for_call(&backend, &case.http, &call);
    let result = match &case.op {
        Op::Read(path) => files.read(path.clone()).await.map(drop),
        Op::Write(path) => files
            .write(path.clone(), b"x".to_vec(), None)
            .await
            .map(drop),
        Op::Remove(path) => files.remove(path.clone()).await.map(drop),
        Op::List(path) => files.list(path.clone()).await.map(drop),
        Op::Stat(path) => files.metadata(path.clone()).await.map(drop),
        Op::Send { method, url } => {
            let request = HttpRequest {
                method: method.clone(),
                url: url.clone(),
                headers: vec![],
                body: None,
            };
            http.send(request, None).await.map(drop)
        }
    };
    decision(result.map_err(host_side))
}

#[tokio::test]
async fn host_and_sdk_fake_agree_on_every_grant_case() {
    let cases = conformance::cases();
    assert!(cases.len() >= 20, "the table covers the rules");
    for case in &cases {
        let host = on_the_host(case).await;
        let sdk = tend_sdk::testing::decide(case);
        assert_eq!(host, sdk, "host and SDK disagree on {:?}", case.op);
        assert_eq!(host, case.expect, "{:?}", case.op);
    }
}
