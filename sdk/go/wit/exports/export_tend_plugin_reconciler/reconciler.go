// Package export_tend_plugin_reconciler is where the generated exports
// (tend/sdk/wit/exports/wit_exports) call the plugin. Written by hand, not
// generated: tend/sdk/plugin.Export sets the two functions, so the generated
// code needs no plugin-specific package.
package export_tend_plugin_reconciler

import (
	"tend/sdk/wit/imports/tend_plugin_types"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

// DescribeFunc and ReconcileFunc are the plugin's, set by plugin.Export.
var (
	DescribeFunc  func() tend_plugin_types.PluginInfo
	ReconcileFunc func(tend_plugin_types.Context) witTypes.Result[tend_plugin_types.Outcome, tend_plugin_types.Error]
)

func Describe() tend_plugin_types.PluginInfo { return DescribeFunc() }

func Reconcile(ctx tend_plugin_types.Context) witTypes.Result[tend_plugin_types.Outcome, tend_plugin_types.Error] {
	return ReconcileFunc(ctx)
}
