package main

import (
	"strings"
	"testing"

	"tend/sdk"
	"tend/sdk/fake"
)

const (
	url      = "http://127.0.0.1:10248/healthz"
	report   = "/var/lib/probe/report.txt"
	settings = `{"url":"` + url + `","report":"` + report + `"}`
)

// deniedWrite is what Tend's host answers a write of report when no files
// grant covers it (tend-rules files::resolve), copied here as test data:
// tend/sdk/fake is scripted and knows no grants. tests/e2e/languages.rs in
// Tend checks the host's message end to end; for grant-faithful answers run
// `tend plan` against the real host.
const deniedWrite = `no files grant covers /var/lib/probe/report.txt: add { path = "/var/lib/probe", write = true } to [plugins.probe.grants] files`

var thisNode = tend.ObjectKey{APIVersion: "v1", Kind: "Node", Name: "node-1"}

// node is a scripted node where every call the probe makes succeeds: the
// endpoint answers 200 and the Node exists.
func node() *fake.Host {
	h := fake.New()
	h.HTTP.Answer(url, tend.Response{Status: 200})
	h.Kube.Objects[thisNode] = `{"kind":"Node"}`
	return h
}

func reconcile(h *fake.Host, config string) (tend.Outcome, error) {
	ctx := tend.Context{Plugin: "probe", Config: config, NodeName: "node-1", Triggers: []tend.Trigger{{Kind: "manual"}}}
	return probe{}.Reconcile(ctx, h.Caps())
}

func wantError(t *testing.T, err error, kind tend.Kind, message string) {
	t.Helper()
	if got, ok := err.(*tend.Error); !ok || got.Kind != kind || got.Message != message {
		t.Errorf("got %v, want %s: %s", err, kind, message)
	}
}

func TestHealthyRunsCountAndReport(t *testing.T) {
	h := node()
	for _, want := range []struct{ runs, line string }{
		{"1", "probe run 1: " + url + " answered 200; node node-1 found"},
		{"2", "probe run 2: " + url + " answered 200; node node-1 found"},
	} {
		outcome, err := reconcile(h, settings)
		if err != nil {
			t.Fatal(err)
		}
		if outcome.Health != tend.Healthy || outcome.Message != want.line {
			t.Errorf("outcome %+v, want healthy: %s", outcome, want.line)
		}
		if got := string(h.Files.Written[report]); got != want.line+"\n" {
			t.Errorf("report %q", got)
		}
		if got := string(h.State.Values["runs"]); got != want.runs {
			t.Errorf("runs %q, want %s", got, want.runs)
		}
	}
	if sent := h.HTTP.Sent; len(sent) != 2 || sent[0].Method != "GET" || sent[0].TimeoutMs != 2000 {
		t.Errorf("sent %+v, want two GETs with a 2000 ms timeout", sent)
	}
}

func TestUnreachableAndMissingDegrade(t *testing.T) {
	h := node()
	h.HTTP.Fail(url, tend.Unavailable, "connection refused")
	delete(h.Kube.Objects, thisNode) // a get of it: not-found
	outcome, err := reconcile(h, settings)
	want := "probe run 1: " + url + " unreachable (connection refused); node node-1 missing"
	if err != nil || outcome.Health != tend.Degraded || outcome.Message != want {
		t.Errorf("got %+v, %v; want degraded: %s", outcome, err, want)
	}
}

func TestOffAClusterTheNodeIsNotCheckedAndTheProbeDecides(t *testing.T) {
	h := node()
	why := "no Kubernetes API: not in a cluster"
	h.Kube.Fail(thisNode, tend.Unavailable, why)
	outcome, err := reconcile(h, settings)
	want := "probe run 1: " + url + " answered 200; node node-1 not checked (" + why + ")"
	if err != nil || outcome.Health != tend.Healthy || outcome.Message != want {
		t.Errorf("got %+v, %v; want healthy: %s", outcome, err, want)
	}
	if got := string(h.Files.Written[report]); got != want+"\n" {
		t.Errorf("report %q", got)
	}

	long := strings.Repeat("é", 300)
	h.Kube.Fail(thisNode, tend.Unavailable, long)
	outcome, err = reconcile(h, settings)
	quoted := "not checked (" + long[:maxMessage] + "…)"
	if err != nil || !strings.HasSuffix(outcome.Message, quoted) {
		t.Errorf("got %+v, %v; want it to end with %s", outcome, err, quoted)
	}
}

func TestADeniedNodeLookupFailsTheReconcile(t *testing.T) {
	h := node()
	h.Kube.Fail(thisNode, tend.Denied, "no kube grant")
	_, err := reconcile(h, settings)
	wantError(t, err, tend.Denied, "no kube grant")
}

func TestWithoutAFilesGrantTheWriteIsDenied(t *testing.T) {
	h := node()
	h.Files.Fail(report, tend.Denied, deniedWrite)
	_, err := reconcile(h, settings)
	wantError(t, err, tend.Denied, deniedWrite)
}

func TestABadConfigNamesTheKeyAndAnExample(t *testing.T) {
	_, err := reconcile(node(), `{"url":7,"report":"/r"}`)
	wantError(t, err, tend.Invalid, `[plugins.probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"`)
	_, err = reconcile(node(), `{"url":"http://x/","report":7}`)
	wantError(t, err, tend.Invalid, `[plugins.probe.config] report: expected a string, for example "/var/lib/{{name}}/report.txt"`)
}
