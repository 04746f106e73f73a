package rollout

import (
	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
)

// Rejected reads Contour's verdict on a proxy: true with Contour's reason
// when Contour found the current spec invalid or orphaned. A verdict on an
// older generation of the proxy is not a verdict on what we wrote.
func Rejected(p *contourv1.HTTPProxy) (bool, string) {
	switch p.Status.CurrentStatus {
	case "invalid", "orphaned":
	default:
		return false, ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == contourv1.ValidConditionType && c.ObservedGeneration != p.Generation {
			return false, ""
		}
	}
	why := p.Status.Description
	for _, c := range p.Status.Conditions {
		for _, e := range c.Errors {
			why += "; " + e.Message
		}
	}
	return true, why
}
