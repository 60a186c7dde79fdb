// dra-cel evaluates DRA device selectors with the scheduler's own CEL compiler (k8s.io/dynamic-resource-allocation/cel).
// Input on stdin: {"consumableCapacity", "expressions": [...], "devices": [{"driver", "device": <resource.k8s.io/v1 Device>}]};
// output: one entry per expression with its compile error, or per device whether it matches and any runtime error.
// Built by testbed/outcomes/cel.py per Kubernetes minor with the celDevice of that minor's API
// (dra_cel_maps.go up to 1.37, dra_cel_slices.go from 1.38), never committed as a binary.
package main

import (
	"context"
	"encoding/json"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Driver string             `json:"driver"`
	Device resourceapi.Device `json:"device"`
}

type input struct {
	ConsumableCapacity bool     `json:"consumableCapacity"`
	Expressions        []string `json:"expressions"`
	Devices            []device `json:"devices"`
}

type outcome struct {
	Error   string   `json:"error,omitempty"`
	Matches []bool   `json:"matches"`
	Errors  []string `json:"errors"`
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		os.Stderr.WriteString("dra-cel: bad input: " + err.Error() + "\n")
		os.Exit(2)
	}
	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: in.ConsumableCapacity})
	out := make([]outcome, 0, len(in.Expressions))
	for _, expression := range in.Expressions {
		result := compiler.CompileCELExpression(expression, dracel.Options{})
		o := outcome{Matches: make([]bool, len(in.Devices)), Errors: make([]string, len(in.Devices))}
		if result.Error != nil {
			o.Error = result.Error.Error()
			out = append(out, o)
			continue
		}
		for i, d := range in.Devices {
			device, err := celDevice(d.Driver, d.Device)
			if err != nil {
				o.Errors[i] = "dra-cel: " + err.Error()
				continue
			}
			matches, _, err := result.DeviceMatches(context.Background(), device)
			o.Matches[i] = matches
			if err != nil {
				o.Errors[i] = err.Error()
			}
		}
		out = append(out, o)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
