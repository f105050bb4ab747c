module {{name_snake}}

go 1.27.1

require (
	go.bytecodealliance.org/pkg v0.4.0
	tend/sdk v0.0.0
)

// Tend's Go SDK and the bindings' runtime it vendors, from the Tend checkout:
// builds need no module proxy (GOPROXY=off).
replace (
	go.bytecodealliance.org/pkg => {{tend}}/sdk/go/pkg
	tend/sdk => {{tend}}/sdk/go
)
