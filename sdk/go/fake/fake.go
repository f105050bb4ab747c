// Package fake is a scripted, in-memory host for unit tests of Go plugins:
// the state store, the files written, HTTP answers and Kubernetes objects,
// so a plugin's tests run with `go test` natively, without a component build
// or a host.
//
// It is scripted, not faithful: it knows no grants and none of the host's
// rules. Every call succeeds (a write is kept, a state key is stored) unless
// the test scripted an error for it, with Fail on the capability: say
//
//	h.Files.Fail("/var/lib/probe/report.txt", tend.Denied, "no files grant covers …")
//
// and that write answers exactly that error. A test of how a plugin handles
// a refusal copies the host's message as test data and checks that the
// plugin propagates it unchanged. Only Tend's host decides grants (the Rust
// crate tend-rules, written once); for grant-faithful answers run
// `tend plan` against the real host. So this fake does not run the shared
// conformance table (sdk/conformance.json) that the Rust, Python and
// JavaScript fakes pass: reaching the rules from Go would need a WebAssembly
// runtime for the wasm fakes (none in Go's standard library, and no Go
// modules can be fetched here) or cgo against a native fakes library that
// every plugin's `go test` would then carry.
//
// An HTTP request to a URL with nothing scripted, or a Kubernetes get of an
// object that is not in Kube.Objects, answers an error whose message starts
// with "fake:", which is none of the host's.
package fake

import (
	"tend/sdk"
)

// Host is the fake node. Script its capabilities, call Caps for the plugin,
// then look at State.Values, Files.Written and HTTP.Sent.
type Host struct {
	State *State
	Files *Files
	HTTP  *HTTP
	Kube  *Kube
}

// New is an empty node: no state, no files, no answers, no objects.
func New() *Host {
	return &Host{
		State: &State{Values: map[string][]byte{}},
		Files: &Files{Written: map[string][]byte{}},
		HTTP:  &HTTP{},
		Kube:  &Kube{Objects: map[tend.ObjectKey]string{}},
	}
}

// Caps is the capabilities the plugin's Reconcile gets.
func (h *Host) Caps() tend.Host {
	return tend.Host{State: h.State, Files: h.Files, HTTP: h.HTTP, Kube: h.Kube}
}

// failures is the errors scripted for a capability, by what the call names.
type failures[K comparable] map[K]tend.Error

func (f *failures[K]) add(key K, kind tend.Kind, message string) {
	if *f == nil {
		*f = failures[K]{}
	}
	(*f)[key] = tend.Error{Kind: kind, Message: message}
}

// of is the error scripted for key (a fresh *tend.Error each call), or nil.
func (f failures[K]) of(key K) error {
	if err, ok := f[key]; ok {
		return &err
	}
	return nil
}

// State is the plugin's key-value store: Values, by key.
type State struct {
	Values map[string][]byte
	failed failures[string]
}

// Fail scripts every Get and Set of key to answer an *tend.Error of kind
// with message.
func (s *State) Fail(key string, kind tend.Kind, message string) {
	s.failed.add(key, kind, message)
}

// Get implements tend.State.
func (s *State) Get(key string) ([]byte, bool, error) {
	if err := s.failed.of(key); err != nil {
		return nil, false, err
	}
	value, ok := s.Values[key]
	return value, ok, nil
}

// Set implements tend.State.
func (s *State) Set(key string, value []byte) error {
	if err := s.failed.of(key); err != nil {
		return err
	}
	s.Values[key] = append([]byte(nil), value...)
	return nil
}

// Files is files on the node: Written holds every file written, by path.
type Files struct {
	Written map[string][]byte
	failed  failures[string]
}

// Fail scripts every write of path to answer an *tend.Error of kind with
// message, and write nothing.
func (f *Files) Fail(path string, kind tend.Kind, message string) {
	f.failed.add(path, kind, message)
}

// Write implements tend.Files.
func (f *Files) Write(path string, contents []byte) (bool, error) {
	if err := f.failed.of(path); err != nil {
		return false, err
	}
	old, existed := f.Written[path]
	f.Written[path] = append([]byte(nil), contents...)
	return !existed || string(old) != string(contents), nil
}

// HTTP answers requests by URL, as scripted with Answer and Fail; Sent is
// every request sent, in order.
type HTTP struct {
	Sent    []tend.Request
	answers map[string]tend.Response
	failed  failures[string]
}

// Answer scripts every request to url to answer resp.
func (h *HTTP) Answer(url string, resp tend.Response) {
	if h.answers == nil {
		h.answers = map[string]tend.Response{}
	}
	h.answers[url] = resp
	delete(h.failed, url)
}

// Fail scripts every request to url to answer an *tend.Error of kind with
// message.
func (h *HTTP) Fail(url string, kind tend.Kind, message string) {
	h.failed.add(url, kind, message)
	delete(h.answers, url)
}

// Send implements tend.HTTP.
func (h *HTTP) Send(req tend.Request) (tend.Response, error) {
	h.Sent = append(h.Sent, req)
	if err := h.failed.of(req.URL); err != nil {
		return tend.Response{}, err
	}
	resp, ok := h.answers[req.URL]
	if !ok {
		return tend.Response{}, tend.Errorf(tend.Other, "fake: nothing scripted for %s %s: call HTTP.Answer or HTTP.Fail", req.Method, req.URL)
	}
	return resp, nil
}

// Kube is the Kubernetes API: Objects maps an object's key to its JSON text.
type Kube struct {
	Objects map[tend.ObjectKey]string
	failed  failures[tend.ObjectKey]
}

// Fail scripts every get of key to answer an *tend.Error of kind with
// message.
func (k *Kube) Fail(key tend.ObjectKey, kind tend.Kind, message string) {
	k.failed.add(key, kind, message)
}

// Get implements tend.Kube: a scripted error, else the object, else
// NotFound with the fake's own message.
func (k *Kube) Get(key tend.ObjectKey) (string, error) {
	if err := k.failed.of(key); err != nil {
		return "", err
	}
	object, ok := k.Objects[key]
	if !ok {
		name := key.Name
		if key.Namespace != "" {
			name = key.Namespace + "/" + name
		}
		return "", tend.Errorf(tend.NotFound, "fake: no %s %s %s in Kube.Objects", key.APIVersion, key.Kind, name)
	}
	return object, nil
}
