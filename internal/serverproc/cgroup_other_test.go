//go:build !linux

package serverproc

// No cgroup is made outside Linux (cgroup_other.go): none to find or remove.

func (cg *cgroup) path() string    { return "" }
func removeCgroupDir(string) error { return nil }
