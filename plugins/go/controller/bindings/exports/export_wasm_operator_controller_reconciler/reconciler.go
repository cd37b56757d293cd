// Package export_wasm_operator_controller_reconciler implements what the
// component exports (`wasm-operator:controller/reconciler@0.3.0`): the
// generated `wit_exports` lifts the call's arguments and calls Info and
// Reconcile here, which hand them to the plugin registered with the SDK
// (`controller/component.Export`). Written by us, not generated
// (wit-bindgen only writes stubs here); kept next to the generated packages
// because their import path names it.
package export_wasm_operator_controller_reconciler

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	wit "github.com/wasm-operator/wasm-operator/plugins/go/controller/bindings/imports/wasm_operator_controller_types"
)

// Handler is the plugin behind the export: its name and version, and the
// function that maps a raw input to a raw output or an error.
type Handler struct {
	Name      string
	Version   string
	Reconcile func(wit.ReconcileInput) (wit.ReconcileOutput, *wit.ReconcileError)
}

var registered *Handler

// Register makes h the component's plugin (the SDK calls it once, from the
// plugin's init).
func Register(h *Handler) {
	registered = h
}

// Info is `reconciler.info`.
func Info() wit.PluginInfo {
	if registered == nil {
		return wit.PluginInfo{Name: "unregistered", Version: "0.0.0"}
	}
	return wit.PluginInfo{Name: registered.Name, Version: registered.Version}
}

// Reconcile is `reconciler.reconcile`.
func Reconcile(input wit.ReconcileInput) witTypes.Result[wit.ReconcileOutput, wit.ReconcileError] {
	if registered == nil || registered.Reconcile == nil {
		return witTypes.Err[wit.ReconcileOutput](wit.ReconcileError{
			Message:   "no plugin registered: call component.Export from the plugin's init",
			Retryable: false,
		})
	}
	out, err := registered.Reconcile(input)
	if err != nil {
		return witTypes.Err[wit.ReconcileOutput](*err)
	}
	return witTypes.Ok[wit.ReconcileOutput, wit.ReconcileError](out)
}
