// celDevice from Kubernetes 1.38: the CEL input holds attributes and capacities in the allocator's interned
// form, which only the conversion of a whole ResourceSlice builds; so the device travels in a slice of one,
// converted as the scheduler converts the slices it reads.
package main

import (
	resourceapi "k8s.io/api/resource/v1"
	draapi "k8s.io/dynamic-resource-allocation/api"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

func celDevice(driver string, d resourceapi.Device) (dracel.Device, error) {
	in := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Devices: []resourceapi.Device{d}}}
	var out draapi.ResourceSlice
	if err := draapi.Convert_v1_ResourceSlice_To_api_ResourceSlice(&in, &out, nil); err != nil {
		return dracel.Device{}, err
	}
	converted := out.Spec.Devices[0]
	return dracel.Device{Driver: driver, AllowMultipleAllocations: converted.AllowMultipleAllocations,
		LookupUniqueString: out.LookupUniqueString, Attributes: converted.Attributes, Capacity: converted.Capacity}, nil
}
