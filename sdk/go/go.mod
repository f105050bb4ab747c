module tend/sdk

go 1.27.1

require go.bytecodealliance.org/pkg v0.4.0

// The generated bindings' runtime, vendored from the wit-bindgen-go crate
// (v0.4.0 of github.com/bytecodealliance/go-pkg): builds need no module proxy.
replace go.bytecodealliance.org/pkg => ./pkg
