package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/dynmig/dynmig/fakehal"
)

func TestParseFakeGPUs(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []string
		wantErr bool
	}{
		{name: "count and model", value: "3x" + fakehal.DefaultModel, want: fakehal.Repeat(3, fakehal.DefaultModel)},
		{name: "list", value: "A30,A100-SXM4-40GB", want: []string{"A30", "A100-SXM4-40GB"}},
		{name: "one model", value: "A30", want: []string{"A30"}},
		{name: "zero", value: "0xA30", wantErr: true},
		{name: "negative", value: "-2xA30", wantErr: true},
		{name: "absurdly many", value: "99999999999xA30", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFakeGPUs(tt.value)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			assert.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
