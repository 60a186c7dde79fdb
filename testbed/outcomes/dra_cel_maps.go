// celDevice for Kubernetes up to 1.37: the CEL input takes the API's attribute and capacity maps as they are.
package main

import (
	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

func celDevice(driver string, d resourceapi.Device) (dracel.Device, error) {
	return dracel.Device{Driver: driver, AllowMultipleAllocations: d.AllowMultipleAllocations,
		Attributes: d.Attributes, Capacity: d.Capacity}, nil
}
