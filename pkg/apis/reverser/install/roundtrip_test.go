package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"

	"reverser.dev/reverser/pkg/apis/reverser/fuzzer"
)

// TestRoundTripTypes converts random internal objects to v1alpha1, through
// JSON and back, and requires them unchanged: conversion loses nothing.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, fuzzer.Funcs)
}
