int low() { return 2; }
