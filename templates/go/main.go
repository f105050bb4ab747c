package main

// main is empty: the host calls the component's exports (main_wasip1.go).
func main() {}
