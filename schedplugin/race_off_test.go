//go:build !race

package schedplugin_test

const raceEnabled = false
