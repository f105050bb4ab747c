// Package tend is Tend's Go SDK: what a plugin's logic sees of the host,
// as plain Go that builds and tests natively.
//
// Why a layer over the generated bindings (tend/sdk/wit): those compile only
// for GOOS=wasip1 and speak the canonical ABI's types (Option, Result, an
// error variant). A plugin written against the Plugin and Host interfaces
// here runs in `go test` against tend/sdk/fake, and in the host through
// tend/sdk/plugin.Export, unchanged. Errors are Go errors (*Error, with the
// WIT's kind and the operator's message); ParseConfig reads the operator's
// `[plugins.NAME.config]` into a struct.
//
// Host covers the capabilities the SDK's plugins use so far (state, files,
// http, kube get); the others are in the generated bindings, for wasip1
// builds, until a plugin needs them here.
package tend

import (
	"errors"
	"fmt"
)

// Kind is the case of the WIT's `error` variant, in its order.
type Kind uint8

const (
	// Denied: not granted; the message names the grant to add.
	Denied Kind = iota
	// NotFound: the file, key, unit or resource does not exist.
	NotFound
	// Conflict: the target changed under us or is in a conflicting state.
	Conflict
	// Unavailable: the backend could not be reached.
	Unavailable
	// Timeout: the call or the reconcile ran past its deadline.
	Timeout
	// Invalid: the request is malformed (bad path, URL or config).
	Invalid
	// BudgetExhausted: a host-wide budget for destructive operations is used up.
	BudgetExhausted
	// Other: anything else.
	Other
)

var kindNames = [...]string{"denied", "not-found", "conflict", "unavailable", "timeout", "invalid", "budget-exhausted", "other"}

// String is the kind as the WIT spells it: "denied", "not-found", ...
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Error is a capability's failure, or a reconcile's.
type Error struct {
	Kind    Kind
	Message string
}

func (e *Error) Error() string { return e.Kind.String() + ": " + e.Message }

// Errorf makes an *Error of kind with a formatted message.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// KindOf is the kind of the *Error in err's chain; ok is false when there is none.
func KindOf(err error) (kind Kind, ok bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	return Other, false
}

// Health is how a reconcile left what the plugin manages.
type Health uint8

const (
	// Healthy: everything the plugin manages is as declared.
	Healthy Health = iota
	// Progressing: work is under way or waiting on something.
	Progressing
	// Degraded: something is wrong that the plugin could not fix.
	Degraded
)

// Trigger is why a reconcile runs: Kind "startup", "interval", "file", ...;
// Subject what changed, when the kind has one ("" otherwise).
type Trigger struct {
	Kind    string
	Subject string
}

// Context is everything a plugin knows about one reconcile.
type Context struct {
	// Plugin is the name the operator configured it under.
	Plugin string
	// Config is `[plugins.NAME.config]` as JSON text ("{}" when absent).
	Config   string
	Triggers []Trigger
	NodeName string
	// DryRun: mutations are recorded into a plan; the host enforces it.
	DryRun bool
}

// Outcome is the result of a reconcile that ran to completion.
type Outcome struct {
	Health Health
	// Message is one line for operators.
	Message string
	// RequeueAfterMs asks to run again after that long (0: no).
	RequeueAfterMs uint64
}

// Info is a plugin's identity, shown by `tend plugins inspect`.
type Info struct {
	Name, Version, Summary string
}

// Plugin is what a Go plugin implements.
type Plugin interface {
	// Describe must not call any capability.
	Describe() Info
	// Reconcile brings what the plugin manages towards its declared state,
	// once. A failure is best an *Error; any other error reaches the host as
	// kind Other.
	Reconcile(ctx Context, host Host) (Outcome, error)
}

// Host is the capabilities a reconcile may call, each as granted.
type Host struct {
	State State
	Files Files
	HTTP  HTTP
	Kube  Kube
}

// State is the plugin's own persistent key-value store.
type State interface {
	// Get returns the value under key; ok is false when there is none.
	Get(key string) (value []byte, ok bool, err error)
	Set(key string, value []byte) error
}

// Files is files on the node, inside the granted roots.
type Files interface {
	// Write replaces a file's content atomically (mode 0o644); changed is
	// false when the file already held exactly that.
	Write(path string, contents []byte) (changed bool, err error)
}

// Request is an HTTP request to a granted URL.
type Request struct {
	Method  string
	URL     string
	Headers [][2]string
	Body    []byte
	// TimeoutMs is the per-request timeout; 0: the host's default (5000).
	TimeoutMs uint32
}

// Response is a whole HTTP response; redirects are not followed.
type Response struct {
	Status  uint16
	Headers [][2]string
	Body    []byte
}

// HTTP sends requests to granted URLs.
type HTTP interface {
	Send(req Request) (Response, error)
}

// ObjectKey names one Kubernetes object; Namespace is "" for cluster-scoped kinds.
type ObjectKey struct {
	APIVersion, Kind, Namespace, Name string
}

// Kube is the Kubernetes API, objects as JSON text.
type Kube interface {
	// Get returns the object; a missing one is a NotFound *Error.
	Get(key ObjectKey) (string, error)
}
