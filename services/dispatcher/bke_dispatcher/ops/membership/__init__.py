"""What a join and a removal share: the gates a request is judged on, and the answer to a request
given up on."""
