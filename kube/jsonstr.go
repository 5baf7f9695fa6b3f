package kube

import "encoding/json"

// appendQuoted appends s as a JSON string.
func appendQuoted(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // marshalling a string cannot fail
	return append(b, q...)
}
