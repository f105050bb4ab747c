//! What the kube rules add to one call (issue 15): the path-part validator,
//! the grant check, the selector check on an object and the `fields`
//! narrowing of a patch, each in nanoseconds per call (release). Numbers go
//! to docs/benchmarks.md.
//!
//!   cargo bench -p tend-rules --bench rules

use serde_json::{Value, json};
use std::hint::black_box;
use std::time::Instant;
use tend_rules::kube::{
    Access, KubeRule, PatchShape, Verb, check, check_key, check_object, list_scope,
};

/// Median over 31 batches of ns per call.
fn measure(name: &str, mut f: impl FnMut()) {
    const BATCH: u32 = 20_000;
    for _ in 0..BATCH {
        f();
    }
    let mut samples: Vec<f64> = (0..31)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    println!("{name:<58} p50 {:>8.0} ns", samples[samples.len() / 2]);
}

fn rules(text: &str) -> Vec<KubeRule> {
    #[derive(serde::Deserialize)]
    struct Grants {
        kube: Vec<KubeRule>,
    }
    // JSON rather than TOML: the crate has no TOML parser, and the rules
    // deserialize the same from either.
    serde_json::from_str::<Grants>(text).unwrap().kube
}

fn main() {
    let pods = rules(
        r#"{"kube": [
            {"resource": "nodes", "verbs": ["get", "patch"], "names": ["$NODE"],
             "fields": ["metadata.labels", "metadata.annotations", "status.conditions"]},
            {"resource": "pods", "verbs": ["get", "list", "delete"],
             "field-selector": "spec.nodeName=$NODE", "label-selector": "app in (web, api),tier!=db"}
        ]}"#,
    );
    let pod: Value = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7d9f8-abcde", "namespace": "shop",
                     "labels": {"app": "web", "tier": "front", "pod-template-hash": "7d9f8"}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "nginx"}]}
    });
    let get_pod = Access {
        group: "",
        resource: "pods",
        verb: Verb::Delete,
        namespace: Some("shop"),
        name: Some("web-7d9f8-abcde"),
    };
    let patch_node = Access {
        group: "",
        resource: "nodes",
        verb: Verb::Patch,
        namespace: None,
        name: Some("node-1"),
    };
    let label_patch = json!({"metadata": {"labels": {"tend.dev/checked": "true"}}});

    measure("check_key (api-version, kind, namespace, name)", || {
        check_key(
            black_box("apps/v1"),
            black_box("Deployment"),
            Some(black_box("shop")),
            Some(black_box("web-7d9f8-abcde")),
        )
        .unwrap()
    });
    measure(
        "check (grant: group, resource, verb, namespace, name)",
        || check(black_box(&pods), "bench", "node-1", black_box(&get_pod)).unwrap(),
    );
    measure("check_object (label and field selectors on a Pod)", || {
        check_object(
            black_box(&pods),
            "bench",
            "node-1",
            &get_pod,
            Some(black_box(&pod)),
            None,
        )
        .unwrap()
    });
    measure("check_object (fields narrowing of a merge patch)", || {
        check_object(
            black_box(&pods),
            "bench",
            "node-1",
            &patch_node,
            None,
            Some((PatchShape::Merge, black_box(&label_patch))),
        )
        .unwrap()
    });
    let list_pods = Access {
        verb: Verb::List,
        name: None,
        ..get_pod
    };
    let scope = list_scope(
        &pods,
        "bench",
        "node-1",
        &list_pods,
        Some("release=stable"),
        None,
    )
    .unwrap();
    measure("list_scope (selectors ANDed into a list)", || {
        list_scope(
            black_box(&pods),
            "bench",
            "node-1",
            &list_pods,
            Some("release=stable"),
            None,
        )
        .unwrap();
    });
    measure("ListScope::admits (one listed object re-checked)", || {
        assert!(scope.admits(black_box(&pod)))
    });
}
