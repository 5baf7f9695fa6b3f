package kube_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

func TestBindTime(t *testing.T) {
	created := time.Unix(500, 0)
	tests := []struct {
		name string
		ann  map[string]string
		want time.Time
	}{
		{name: "annotation", ann: map[string]string{kube.BindTimeAnnotation: "1000"}, want: time.Unix(1000, 0)},
		{name: "absent: creation time", ann: nil, want: created},
		{name: "not a number: creation time", ann: map[string]string{kube.BindTimeAnnotation: "yesterday"}, want: created},
		{name: "fractional: creation time", ann: map[string]string{kube.BindTimeAnnotation: "1000.5"}, want: created},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.ann, CreationTimestamp: metav1.NewTime(created)}}
			got := kube.BindTime(pod)
			assert.True(t, got.Equal(tt.want), "got %v, want %v", got, tt.want)
		})
	}
}

func TestPodAllocations(t *testing.T) {
	entry := `{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":0,"size":1}}`
	tests := []struct {
		name    string
		ann     map[string]string
		want    int   // entries, when err is nil
		wantErr error // a reservation sentinel
	}{
		{name: "no annotation", ann: nil, want: 0},
		{name: "empty value", ann: map[string]string{reservation.AnnotationKey: ""}, want: 0},
		{name: "one entry", ann: map[string]string{reservation.AnnotationKey: "[" + entry + "]"}, want: 1},
		{name: "malformed JSON", ann: map[string]string{reservation.AnnotationKey: "[" + entry}, wantErr: reservation.ErrMalformed},
		{name: "duplicate entry", ann: map[string]string{reservation.AnnotationKey: "[" + entry + "," + entry + "]"}, wantErr: reservation.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := kube.PodAllocations(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.ann}})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				assert.Nil(t, got)
				return
			}
			require.NoError(t, err)
			assert.Len(t, got, tt.want)
		})
	}
}
