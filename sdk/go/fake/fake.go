// Package fake is an in-memory host for unit tests of Go plugins: the state
// store, files under grants, canned HTTP answers and Kubernetes objects,
// answering as Tend's host does, so a plugin's tests run with `go test`
// natively, without a component build or a host.
//
// The files grant checks and their `denied` messages are the host's
// (tend-rules files::resolve) for plain absolute paths; the host also
// normalizes paths, refuses `..` and resolves symlinks, which a test of a
// plugin's logic has no need of.
package fake

import (
	"path"
	"strings"

	"tend/sdk"
)

// Grant is one `[plugins.NAME.grants] files` entry.
type Grant struct {
	Path  string
	Write bool
}

// Host is the fake node. Set its fields, call Caps for the plugin, then look
// at State and Files.
type Host struct {
	// Plugin is the configured name the host's messages mention.
	Plugin string
	State  map[string][]byte
	// Files holds every file written, by path.
	Files  map[string][]byte
	Grants []Grant
	// Answers maps a URL to its answer: a Response, or an error (for example
	// tend.Errorf(tend.Unavailable, "connection refused")). A URL without
	// one is unavailable.
	Answers map[string]Answer
	// Objects maps an object's key to its JSON text.
	Objects map[tend.ObjectKey]string
}

// Answer is what the fake HTTP capability answers for one URL.
type Answer struct {
	Response tend.Response
	Err      error
}

// New is an empty node for plugin.
func New(plugin string) *Host {
	return &Host{
		Plugin:  plugin,
		State:   map[string][]byte{},
		Files:   map[string][]byte{},
		Answers: map[string]Answer{},
		Objects: map[tend.ObjectKey]string{},
	}
}

// Caps is the capabilities the plugin's Reconcile gets.
func (h *Host) Caps() tend.Host {
	return tend.Host{State: state{h}, Files: files{h}, HTTP: web{h}, Kube: kube{h}}
}

type state struct{ h *Host }

func (s state) Get(key string) ([]byte, bool, error) {
	value, ok := s.h.State[key]
	return value, ok, nil
}

func (s state) Set(key string, value []byte) error {
	s.h.State[key] = append([]byte(nil), value...)
	return nil
}

type files struct{ h *Host }

func (f files) Write(file string, contents []byte) (bool, error) {
	if err := f.h.writable(file); err != nil {
		return false, err
	}
	old, existed := f.h.Files[file]
	f.h.Files[file] = append([]byte(nil), contents...)
	return !existed || string(old) != string(contents), nil
}

// writable is the host's decision on a write: the innermost covering grant
// must have write = true.
func (h *Host) writable(file string) error {
	var grant *Grant
	for i, g := range h.Grants {
		covers := file == g.Path || strings.HasPrefix(file, strings.TrimSuffix(g.Path, "/")+"/")
		if covers && (grant == nil || len(g.Path) > len(grant.Path) || (len(g.Path) == len(grant.Path) && g.Write)) {
			grant = &h.Grants[i]
		}
	}
	switch {
	case grant == nil:
		return tend.Errorf(tend.Denied, "no files grant covers %s: add { path = %q, write = true } to [plugins.%s.grants] files",
			file, path.Dir(file), h.Plugin)
	case !grant.Write:
		return tend.Errorf(tend.Denied, "%s is granted read-only by { path = %q }: set write = true on that grant in [plugins.%s.grants] files",
			file, grant.Path, h.Plugin)
	}
	return nil
}

type web struct{ h *Host }

func (w web) Send(req tend.Request) (tend.Response, error) {
	answer, ok := w.h.Answers[req.URL]
	if !ok {
		return tend.Response{}, tend.Errorf(tend.Unavailable, "%s %s: connection refused", req.Method, req.URL)
	}
	return answer.Response, answer.Err
}

type kube struct{ h *Host }

func (k kube) Get(key tend.ObjectKey) (string, error) {
	object, ok := k.h.Objects[key]
	if !ok {
		return "", tend.Errorf(tend.NotFound, "%s %s %q not found", key.APIVersion, key.Kind, key.Name)
	}
	return object, nil
}
