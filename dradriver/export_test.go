package dradriver

// WatchHealth runs the driver's health loop, as Run does, for tests.
var WatchHealth = (*Driver).watchHealth
