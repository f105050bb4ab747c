package main

import (
	"testing"

	"tend/sdk"
	"tend/sdk/fake"
)

const settings = `{"url":"http://127.0.0.1:10248/healthz","report":"/var/lib/probe/report.txt"}`

// node is a fake node where the probe is granted what tend.toml grants.
func node() *fake.Host {
	h := fake.New("probe")
	h.Grants = []fake.Grant{{Path: "/var/lib/probe", Write: true}}
	h.Answers["http://127.0.0.1:10248/healthz"] = fake.Answer{Response: tend.Response{Status: 200}}
	h.Objects[tend.ObjectKey{APIVersion: "v1", Kind: "Node", Name: "node-1"}] = `{"kind":"Node"}`
	return h
}

func reconcile(h *fake.Host, config string) (tend.Outcome, error) {
	ctx := tend.Context{Plugin: "probe", Config: config, NodeName: "node-1", Triggers: []tend.Trigger{{Kind: "manual"}}}
	return probe{}.Reconcile(ctx, h.Caps())
}

func TestHealthyRunsCountAndReport(t *testing.T) {
	h := node()
	for _, want := range []struct{ runs, line string }{
		{"1", "probe run 1: http://127.0.0.1:10248/healthz answered 200; node node-1 found"},
		{"2", "probe run 2: http://127.0.0.1:10248/healthz answered 200; node node-1 found"},
	} {
		outcome, err := reconcile(h, settings)
		if err != nil {
			t.Fatal(err)
		}
		if outcome.Health != tend.Healthy || outcome.Message != want.line {
			t.Errorf("outcome %+v, want healthy: %s", outcome, want.line)
		}
		if got := string(h.Files["/var/lib/probe/report.txt"]); got != want.line+"\n" {
			t.Errorf("report %q", got)
		}
		if got := string(h.State["runs"]); got != want.runs {
			t.Errorf("runs %q, want %s", got, want.runs)
		}
	}
}

func TestUnreachableAndMissingDegrade(t *testing.T) {
	h := node()
	delete(h.Answers, "http://127.0.0.1:10248/healthz")
	clear(h.Objects)
	outcome, err := reconcile(h, settings)
	want := "probe run 1: http://127.0.0.1:10248/healthz unreachable (GET http://127.0.0.1:10248/healthz: connection refused); node node-1 missing"
	if err != nil || outcome.Health != tend.Degraded || outcome.Message != want {
		t.Errorf("got %+v, %v; want degraded: %s", outcome, err, want)
	}
}

func TestWithoutAFilesGrantTheWriteIsDenied(t *testing.T) {
	h := node()
	h.Grants = nil
	_, err := reconcile(h, settings)
	want := `no files grant covers /var/lib/probe/report.txt: add { path = "/var/lib/probe", write = true } to [plugins.probe.grants] files`
	if kind, _ := tend.KindOf(err); kind != tend.Denied || err.(*tend.Error).Message != want {
		t.Errorf("got %v, want denied: %s", err, want)
	}
}

func TestABadConfigNamesTheKeyAndAnExample(t *testing.T) {
	_, err := reconcile(node(), `{"url":7,"report":"/r"}`)
	want := `[plugins.probe.config] url: expected a string, for example "http://127.0.0.1:10248/healthz"`
	if kind, _ := tend.KindOf(err); kind != tend.Invalid || err.(*tend.Error).Message != want {
		t.Errorf("got %v, want invalid: %s", err, want)
	}
}
