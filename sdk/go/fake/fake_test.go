package fake

import (
	"testing"

	"tend/sdk"
)

// wantError checks that err is an *tend.Error of kind with message.
func wantError(t *testing.T, what string, err error, kind tend.Kind, message string) {
	t.Helper()
	got, ok := err.(*tend.Error)
	if !ok || got.Kind != kind || got.Message != message {
		t.Errorf("%s: got %v, want %s: %s", what, err, kind, message)
	}
}

// Without a script every call succeeds: no grants are checked.
func TestUnscriptedCallsSucceed(t *testing.T) {
	h := New()
	caps := h.Caps()
	if changed, err := caps.Files.Write("/anywhere/../at all", []byte("x")); err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	if changed, err := caps.Files.Write("/anywhere/../at all", []byte("x")); err != nil || changed {
		t.Fatalf("same content: %v %v", changed, err)
	}
	if err := caps.State.Set("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if value, ok, err := caps.State.Get("k"); err != nil || !ok || string(value) != "v" {
		t.Fatalf("get: %q %v %v", value, ok, err)
	}
	if _, ok, err := caps.State.Get("absent"); err != nil || ok {
		t.Fatalf("absent: %v %v", ok, err)
	}
	node := tend.ObjectKey{APIVersion: "v1", Kind: "Node", Name: "n"}
	h.Kube.Objects[node] = `{}`
	if object, err := caps.Kube.Get(node); err != nil || object != `{}` {
		t.Fatalf("kube: %q %v", object, err)
	}
	h.HTTP.Answer("http://x/", tend.Response{Status: 204})
	if resp, err := caps.HTTP.Send(tend.Request{Method: "GET", URL: "http://x/"}); err != nil || resp.Status != 204 {
		t.Fatalf("http: %+v %v", resp, err)
	}
	if len(h.HTTP.Sent) != 1 || h.HTTP.Sent[0].URL != "http://x/" {
		t.Errorf("sent %+v", h.HTTP.Sent)
	}
}

// A scripted error is answered as scripted, every time, and only for what
// it names.
func TestScriptedErrorsAnswerExactly(t *testing.T) {
	h := New()
	caps := h.Caps()
	h.Files.Fail("/f", tend.Denied, "the host's words")
	for range 2 {
		_, err := caps.Files.Write("/f", []byte("x"))
		wantError(t, "write", err, tend.Denied, "the host's words")
	}
	if _, ok := h.Files.Written["/f"]; ok {
		t.Error("a failed write was kept")
	}
	if _, err := caps.Files.Write("/g", nil); err != nil {
		t.Errorf("another path: %v", err)
	}
	h.State.Fail("k", tend.Unavailable, "store down")
	_, _, err := caps.State.Get("k")
	wantError(t, "state get", err, tend.Unavailable, "store down")
	wantError(t, "state set", caps.State.Set("k", nil), tend.Unavailable, "store down")
	h.HTTP.Answer("http://x/", tend.Response{Status: 200})
	h.HTTP.Fail("http://x/", tend.Timeout, "slow")
	_, err = caps.HTTP.Send(tend.Request{Method: "GET", URL: "http://x/"})
	wantError(t, "http", err, tend.Timeout, "slow")
	node := tend.ObjectKey{APIVersion: "v1", Kind: "Node", Name: "n"}
	h.Kube.Fail(node, tend.Denied, "no kube grant")
	_, err = caps.Kube.Get(node)
	wantError(t, "kube", err, tend.Denied, "no kube grant")
}

// What nothing was scripted for says so, in the fake's own words.
func TestUnscriptedAnswersAreTheFakes(t *testing.T) {
	caps := New().Caps()
	_, err := caps.HTTP.Send(tend.Request{Method: "GET", URL: "http://x/"})
	wantError(t, "http", err, tend.Other, "fake: nothing scripted for GET http://x/: call HTTP.Answer or HTTP.Fail")
	_, err = caps.Kube.Get(tend.ObjectKey{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"})
	wantError(t, "kube", err, tend.NotFound, "fake: no v1 Pod ns/p in Kube.Objects")
}
