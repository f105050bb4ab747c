//go:build wasip1

// Package plugin connects a tend.Plugin to the host: Export makes it the
// component's reconciler, and the tend.Host it gets calls the generated
// import bindings. Only for GOOS=wasip1 builds (the component); a plugin's
// unit tests use tend/sdk/fake instead.
package plugin

import (
	"errors"

	"tend/sdk"
	"tend/sdk/wit/exports/export_tend_plugin_reconciler"
	_ "tend/sdk/wit/exports/wit_exports" // the component's exports
	"tend/sdk/wit/imports/tend_plugin_files"
	"tend/sdk/wit/imports/tend_plugin_http"
	"tend/sdk/wit/imports/tend_plugin_kube"
	"tend/sdk/wit/imports/tend_plugin_state"
	types "tend/sdk/wit/imports/tend_plugin_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// Export makes p the component's reconciler; call it from an init function.
func Export(p tend.Plugin) {
	export_tend_plugin_reconciler.DescribeFunc = func() types.PluginInfo {
		info := p.Describe()
		return types.PluginInfo{Name: info.Name, Version: info.Version, Summary: info.Summary}
	}
	export_tend_plugin_reconciler.ReconcileFunc = func(ctx types.Context) witTypes.Result[types.Outcome, types.Error] {
		outcome, err := p.Reconcile(context(ctx), tend.Host{State: state{}, Files: files{}, HTTP: web{}, Kube: kube{}})
		if err != nil {
			return witTypes.Err[types.Outcome](toWit(err))
		}
		requeue := witTypes.None[uint64]()
		if outcome.RequeueAfterMs > 0 {
			requeue = witTypes.Some(outcome.RequeueAfterMs)
		}
		return witTypes.Ok[types.Outcome, types.Error](types.Outcome{
			Health: types.Health(outcome.Health), Message: outcome.Message, RequeueAfterMs: requeue,
		})
	}
}

func context(ctx types.Context) tend.Context {
	triggers := make([]tend.Trigger, len(ctx.Triggers))
	for i, t := range ctx.Triggers {
		triggers[i] = tend.Trigger{Kind: t.Kind, Subject: t.Subject.SomeOr("")}
	}
	return tend.Context{Plugin: ctx.Plugin, Config: ctx.Config, Triggers: triggers, NodeName: ctx.NodeName, DryRun: ctx.DryRun}
}

// makeError builds the WIT error of each tend.Kind, in the WIT's order.
var makeError = [...]func(string) types.Error{
	types.MakeErrorDenied, types.MakeErrorNotFound, types.MakeErrorConflict, types.MakeErrorUnavailable,
	types.MakeErrorTimeout, types.MakeErrorInvalid, types.MakeErrorBudgetExhausted, types.MakeErrorOther,
}

func toWit(err error) types.Error {
	var e *tend.Error
	if errors.As(err, &e) && int(e.Kind) < len(makeError) {
		return makeError[e.Kind](e.Message)
	}
	return types.MakeErrorOther(err.Error())
}

func fromWit(e types.Error) error {
	var message string
	switch e.Tag() {
	case types.Error_Denied:
		message = e.Denied()
	case types.Error_NotFound:
		message = e.NotFound()
	case types.Error_Conflict:
		message = e.Conflict()
	case types.Error_Unavailable:
		message = e.Unavailable()
	case types.Error_Timeout:
		message = e.Timeout()
	case types.Error_Invalid:
		message = e.Invalid()
	case types.Error_BudgetExhausted:
		message = e.BudgetExhausted()
	default:
		message = e.Other()
	}
	return &tend.Error{Kind: tend.Kind(e.Tag()), Message: message}
}

// unwrap turns a generated result into Go's (value, error).
func unwrap[T any](r witTypes.Result[T, types.Error]) (T, error) {
	if r.IsErr() {
		var zero T
		return zero, fromWit(r.Err())
	}
	return r.Ok(), nil
}

type state struct{}

func (state) Get(key string) ([]byte, bool, error) {
	value, err := unwrap(tend_plugin_state.Get(key))
	return value.SomeOr(nil), value.IsSome(), err
}

func (state) Set(key string, value []byte) error {
	_, err := unwrap(tend_plugin_state.Set(key, value))
	return err
}

type files struct{}

func (files) Write(path string, contents []byte) (bool, error) {
	return unwrap(tend_plugin_files.Write(path, contents, witTypes.None[uint32]()))
}

type web struct{}

func (web) Send(req tend.Request) (tend.Response, error) {
	headers := make([]witTypes.Tuple2[string, string], len(req.Headers))
	for i, h := range req.Headers {
		headers[i] = witTypes.Tuple2[string, string]{F0: h[0], F1: h[1]}
	}
	body, timeout := witTypes.None[[]uint8](), witTypes.None[uint32]()
	if req.Body != nil {
		body = witTypes.Some(req.Body)
	}
	if req.TimeoutMs > 0 {
		timeout = witTypes.Some(req.TimeoutMs)
	}
	resp, err := unwrap(tend_plugin_http.Send(tend_plugin_http.Request{
		Method: req.Method, Url: req.URL, Headers: headers, Body: body, TimeoutMs: timeout,
	}))
	if err != nil {
		return tend.Response{}, err
	}
	out := tend.Response{Status: resp.Status, Body: resp.Body, Headers: make([][2]string, len(resp.Headers))}
	for i, h := range resp.Headers {
		out.Headers[i] = [2]string{h.F0, h.F1}
	}
	return out, nil
}

type kube struct{}

func (kube) Get(key tend.ObjectKey) (string, error) {
	namespace := witTypes.None[string]()
	if key.Namespace != "" {
		namespace = witTypes.Some(key.Namespace)
	}
	return unwrap(tend_plugin_kube.Get(tend_plugin_kube.ObjectKey{
		ApiVersion: key.APIVersion, Kind: key.Kind, Namespace: namespace, Name: key.Name,
	}))
}
