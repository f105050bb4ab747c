//go:build wasip1

package main

import "tend/sdk/plugin"

func init() { plugin.Export(probe{}) }
