@needs:topics
Feature: Filter evaluation errors
  A rule that fails to evaluate for a message dead-letters it in that subscription, when the
  subscription says so (the default).

  @RULES-DLQ-001 @needs:dead-letter
  Scenario: A filter naming a system property that does not exist dead-letters the message
    Given a topic "t" with subscriptions "broken", "fine"
    And "t/Subscriptions/broken" has only the rule "bad" with SQL filter `sys.NoSuchProperty = 'x'`
    When message "m" is sent to "t"
    Then peeking "t/Subscriptions/broken" shows nothing
    And peeking "t/Subscriptions/broken/$DeadLetterQueue" shows "m"
    And the dead-lettered "m" in "t/Subscriptions/broken/$DeadLetterQueue" has a dead-letter reason and description
    And peeking "t/Subscriptions/fine" shows "m"

  @RULES-DLQ-001 @needs:dead-letter
  Scenario: An action changing a system property that does not exist dead-letters the message
    Given a topic "t" with subscriptions "s"
    And "t/Subscriptions/s" has only the rule "bad" with the true filter and action `SET sys.NoSuchProperty = 'x'`
    When message "m" is sent to "t"
    Then peeking "t/Subscriptions/s" shows nothing
    And peeking "t/Subscriptions/s/$DeadLetterQueue" shows "m"

  @RULES-DLQ-002
  Scenario: Without dead-lettering on filter evaluation exceptions, a failing rule does not match
    Given a topic "t" with subscription "s" that does not dead-letter on filter evaluation exceptions
    And "t/Subscriptions/s" has only the rule "bad" with SQL filter `sys.NoSuchProperty = 'x'`
    When rule "good" with SQL filter `color = 'red'` is added to "t/Subscriptions/s"
    And message "blue" with property "color" = "blue" is sent to "t"
    And message "red" with property "color" = "red" is sent to "t"
    Then peeking "t/Subscriptions/s" shows "red"
    And peeking "t/Subscriptions/s/$DeadLetterQueue" shows nothing
