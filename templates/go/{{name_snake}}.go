// {{name}}: a Tend plugin in Go.
//
// The problem: an operator wants to know, on every node, that a local HTTP
// endpoint answers and that the node is registered with Kubernetes, with a
// report line on the node itself.
//
// One reconcile counts its runs in state, GETs the configured url, looks up
// this node's Node object, writes one line to the configured report file and
// reports healthy when the endpoint answered 2xx and the Node exists. Off a
// cluster (the kube call answers unavailable) the Node is "not checked" and
// the endpoint alone decides.
//
// The safety: the plugin runs in Tend's sandbox and can do only what its
// grants allow (tend.toml): GET that one URL, get this node's Node, write
// under /var/lib/{{name}}. A missing grant fails the reconcile with the
// host's denied message, which names the grant to add.
//
// The config ([plugins.{{name}}.config]):
//
//	url    = "http://127.0.0.1:10248/healthz"   the endpoint to probe with GET
//	report = "/var/lib/{{name}}/report.txt"     the file the report line goes to
//
// The logic is plain Go against tend.Host, so {{name_snake}}_test.go runs it
// natively against the scripted host of tend/sdk/fake; main_wasip1.go exports
// it in the component.
package main

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"tend/sdk"
)

type config struct {
	URL    string `json:"url" tend:"required" example:"http://127.0.0.1:10248/healthz"`
	Report string `json:"report" tend:"required" example:"/var/lib/{{name}}/report.txt"`
}

type probe struct{}

func (probe) Describe() tend.Info {
	return tend.Info{Name: "{{name}}", Version: "0.1.0", Summary: "probes an HTTP endpoint and this node's Node, writes a report line"}
}

func (probe) Reconcile(ctx tend.Context, host tend.Host) (tend.Outcome, error) {
	var cfg config
	if err := tend.ParseConfig(ctx, &cfg); err != nil {
		return tend.Outcome{}, err
	}
	runs, err := countRun(host.State)
	if err != nil {
		return tend.Outcome{}, err
	}
	answer, answered := "", false
	resp, err := host.HTTP.Send(tend.Request{Method: "GET", URL: cfg.URL, TimeoutMs: 2000})
	if kind, _ := tend.KindOf(err); err != nil && kind == tend.Denied {
		return tend.Outcome{}, err
	} else if err != nil {
		answer = fmt.Sprintf("unreachable (%s)", err.(*tend.Error).Message)
	} else {
		answer = fmt.Sprintf("answered %d", resp.Status)
		answered = resp.Status >= 200 && resp.Status < 300
	}
	node, nodeOK, err := checkNode(host.Kube, ctx.NodeName)
	if err != nil {
		return tend.Outcome{}, err
	}
	line := fmt.Sprintf("%s run %d: %s %s; node %s %s", ctx.Plugin, runs, cfg.URL, answer, ctx.NodeName, node)
	if _, err := host.Files.Write(cfg.Report, []byte(line+"\n")); err != nil {
		return tend.Outcome{}, err
	}
	health := tend.Degraded
	if answered && nodeOK {
		health = tend.Healthy
	}
	return tend.Outcome{Health: health, Message: line}, nil
}

// maxMessage is the most bytes of the host's message a report line quotes.
const maxMessage = 400

// checkNode looks up the Node named name: "found", "missing" (not ok), or,
// off a cluster (no Kubernetes API), "not checked (WHY)" and the probe alone
// decides. Any other error fails the reconcile.
func checkNode(kube tend.Kube, name string) (string, bool, error) {
	_, err := kube.Get(tend.ObjectKey{APIVersion: "v1", Kind: "Node", Name: name})
	switch kind, _ := tend.KindOf(err); {
	case err == nil:
		return "found", true, nil
	case kind == tend.NotFound:
		return "missing", false, nil
	case kind == tend.Unavailable:
		return fmt.Sprintf("not checked (%s)", bounded(err.(*tend.Error).Message)), true, nil
	default:
		return "", false, err
	}
}

// bounded is message cut to maxMessage bytes on a character boundary, ending
// with "…" when cut: a report stays one short line whatever the host said.
func bounded(message string) string {
	if len(message) <= maxMessage {
		return message
	}
	end := maxMessage
	for end > 0 && !utf8.RuneStart(message[end]) {
		end--
	}
	return message[:end] + "…"
}

// countRun is state key runs plus one, stored back. A value that is not a
// count (only another version of this plugin could have written it) restarts
// the count.
func countRun(state tend.State) (uint64, error) {
	stored, _, err := state.Get("runs")
	if err != nil {
		return 0, err
	}
	runs, _ := strconv.ParseUint(string(stored), 10, 64)
	runs++
	return runs, state.Set("runs", []byte(strconv.FormatUint(runs, 10)))
}
