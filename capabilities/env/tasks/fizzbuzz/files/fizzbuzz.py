# Print FizzBuzz from 1 to 100 here.
