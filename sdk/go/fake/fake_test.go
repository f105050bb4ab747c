package fake

import (
	"testing"

	"tend/sdk"
)

// The host's decisions on writes: the innermost covering grant decides, and
// each refusal names the grant to add or change.
func TestWritesFollowTheInnermostGrant(t *testing.T) {
	h := New("p")
	h.Grants = []Grant{{Path: "/var/lib/p", Write: true}, {Path: "/var/lib/p/ro"}}
	files := h.Caps().Files
	if changed, err := files.Write("/var/lib/p/a", []byte("x")); err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	if changed, err := files.Write("/var/lib/p/a", []byte("x")); err != nil || changed {
		t.Fatalf("same content: %v %v", changed, err)
	}
	for file, want := range map[string]string{
		"/var/lib/p/ro/b": `/var/lib/p/ro/b is granted read-only by { path = "/var/lib/p/ro" }: set write = true on that grant in [plugins.p.grants] files`,
		"/var/lib/pp/c":   `no files grant covers /var/lib/pp/c: add { path = "/var/lib/pp", write = true } to [plugins.p.grants] files`,
	} {
		_, err := files.Write(file, nil)
		if kind, _ := tend.KindOf(err); kind != tend.Denied || err.(*tend.Error).Message != want {
			t.Errorf("%s: got %v, want denied: %s", file, err, want)
		}
	}
}
